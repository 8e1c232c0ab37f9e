"""What a judgement is made of: a metric's fields from the judge's reply (or the majority of several), a check-based
metric's result from its checks and rule, the judgement itself (the main metric's grade on top, every metric under
`metrics`), a cached grade made this item's (`from_cache`), and what the batch makes of a grade, fresh or cached
(`finished`: its label, calibration and uncertainty). What each metric records as its provenance is its plan's
(juiz.plan).

`failed_judgement` is the result of an item that could not be graded at all, with the reason and the judge meant
for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from juiz.calibration.grades import apply_calibration
from juiz.check_rule import apply_rule
from juiz.checks import CheckJob
from juiz.engine import Completion, GenerationRequest, JudgeEngine
from juiz.labels import label_for
from juiz.parsing import expected_score, parse_reply
from juiz.samples import combine_samples
from juiz.uncertainty import mark
from schemas import BatchOptions, Judgement, JudgementStatus, Provenance, Triple
from schemas.judgement import CheckResult, CheckStatus, MetricResult, MetricStatus


def parsed_fields(completion: Completion, request: GenerationRequest) -> dict[str, Any]:
    """status, score, … from one completion: what a metric result and a segment grade share."""
    if completion.error is not None:
        return {"status": MetricStatus.FAILED, "error": completion.error}
    parsed = parse_reply(completion.text)
    if not parsed.ok:
        error = parsed.error
        if completion.finish_reason == "length":
            error = f"{error} (reply cut at max_tokens={request.max_tokens})"
        elif not completion.text:
            error = f"{error} (empty reply, finish_reason={completion.finish_reason})"
        return {
            "status": MetricStatus.PARSE_ERROR,
            "raw_output": completion.text,
            "criteria": parsed.criteria,
            "supporting_evidence": parsed.supporting_evidence,
            "error": error,
        }
    assert parsed.score is not None
    return {
        "status": MetricStatus.OK,
        "score": parsed.score,
        "normalized_score": round(parsed.score / 3, 6),
        "expected_score": rounded(expected_score(completion.tokens, completion.top_logprobs)),
        "criteria": parsed.criteria,
        "supporting_evidence": parsed.supporting_evidence,
        "raw_output": completion.text,
    }


def sampled_fields(completion: Completion, request: GenerationRequest) -> dict[str, Any]:
    """`parsed_fields`, or with several replies (request.n > 1) their majority and spread (juiz.samples)."""
    if request.n == 1:
        return parsed_fields(completion, request)
    replies = [completion, *completion.alternatives]
    return combine_samples([parsed_fields(c, request) for c in replies], request.temperature)


def checks_result(
    job: CheckJob, checks: list[CheckResult], reference: str | None, latency_s: float, provenance: Provenance
) -> MetricResult:
    """A check-based metric's result: the rule's grade (juiz.check_rule), the checks, the reference."""
    common: dict[str, Any] = {
        "latency_s": latency_s,
        "provenance": provenance,
        "checks": checks,
        "reference": reference,
    }
    # Failed (not a parse error) when the engine failed every check the score is made of; info checks may still have
    # been read, e.g. checks-8's per-point checks, which hold the question and reference points but not the answer.
    scored = [c for c in checks if c.role != "info"]
    if scored and all(c.status is CheckStatus.FAILED for c in scored):
        errors = dict.fromkeys(c.error for c in scored if c.error)
        return MetricResult(status=MetricStatus.FAILED, error="; ".join(e for e in errors if e)[:500], **common)
    outcome = apply_rule(job.template, checks)
    if not outcome.ok:
        return MetricResult(
            status=MetricStatus.PARSE_ERROR,
            error=outcome.error,
            criteria=outcome.criteria,
            supporting_evidence=outcome.supporting_evidence,
            raw_output=outcome.text,
            **common,
        )
    assert outcome.score is not None
    return MetricResult(
        status=MetricStatus.OK,
        score=outcome.score,
        normalized_score=round(outcome.score / 3, 6),
        expected_score=rounded(outcome.expected_score),
        strength=outcome.strength,
        criteria=outcome.criteria,
        supporting_evidence=outcome.supporting_evidence,
        raw_output=outcome.text,
        **common,
    )


def judgement_of(triple: Triple, options: BatchOptions, metrics: dict[str, MetricResult]) -> Judgement:
    """The result: the main metric's grade in the top-level fields, every metric under `metrics`; not yet `finished`."""
    main = metrics[options.primary_metric]
    status = JudgementStatus.FAILED if main.status is MetricStatus.SKIPPED else JudgementStatus(main.status.value)
    assert main.provenance is not None
    return Judgement(
        **item_fields(triple),
        status=status,
        score=main.score,
        normalized_score=main.normalized_score,
        expected_score=main.expected_score,
        criteria=main.criteria,
        supporting_evidence=main.supporting_evidence,
        raw_output=main.raw_output,
        latency_s=main.latency_s,
        provenance=main.provenance,
        error=main.error,
        metrics=metrics,
        samples=main.samples,
    )


def finished(judgement: Judgement, options: BatchOptions) -> Judgement:
    """What the batch makes of a grade, fresh or cached alike (the cache keeps none of it), in the order each step
    reads the one before: the label (the label mapping), the calibrated grade (options.calibration), then how
    uncertain the result is (which reads the calibrated grade, or the expected score near the mapping's cuts)."""
    judgement.automated_label = label_for(judgement, options.label_mapping)
    apply_calibration(judgement, options.calibration)
    return mark(judgement, options.label_mapping)


def rounded(value: float | None) -> float | None:
    return None if value is None else round(min(max(value, 0.0), 1.0), 6)


def with_origin(judgements: list[Judgement], engine: JudgeEngine) -> list[Judgement]:
    """Each result records the engine's origin: a judge server's `engine` and `engine_host`, vLLM's `engine_dtype`."""
    origin = dict(engine.origin)
    if not origin:
        return judgements
    for judgement in judgements:
        judgement.provenance = judgement.provenance.model_copy(update=origin)
        for metric in (judgement.metrics or {}).values():
            if metric.provenance is not None:
                metric.provenance = metric.provenance.model_copy(update=origin)
    return judgements


def item_fields(triple: Triple) -> dict[str, Any]:
    """What every judgement copies from its triple: the user's own fields, then the known ones.

    A user field named like a result field (e.g. a dataset's own `expected_score`) is kept as `input_<name>`, so it
    neither clashes with nor masquerades as juiz's value.
    """
    reserved = Judgement.model_fields.keys()
    return {
        **{f"input_{k}" if k in reserved else k: v for k, v in triple.passthrough().items()},
        "id": triple.id,
        "question": triple.question,
        "answer": triple.answer,
        "context": triple.context,
        "manual_label": triple.manual_label,
    }


def from_cache(cached: Mapping[str, Any], triple: Triple) -> Judgement:
    """A cached grade (juiz.result_cache.cacheable) as this item's result: its own fields, marked `cached`, not yet
    `finished` (its batch's label mapping and calibration apply, never the cached batch's)."""
    return Judgement.model_validate({**item_fields(triple), **cached, "cached": True})


def failed_judgement(
    triple: Triple, options: BatchOptions, reason: str, provenance: Mapping[str, Provenance]
) -> Judgement:
    """A `failed` result for an item that could not be graded at all, with the reason and, for each metric, the
    judge meant for it (`provenance`: juiz.plan.PlannedItem.provenance, or provenance_by_metric)."""
    metrics: dict[str, MetricResult] = {
        metric: MetricResult(status=MetricStatus.FAILED, error=reason, provenance=provenance[metric])
        for metric in options.metrics
    }
    return Judgement(
        **item_fields(triple),
        status=JudgementStatus.FAILED,
        error=reason,
        provenance=provenance[options.primary_metric],
        metrics=metrics,
    )
