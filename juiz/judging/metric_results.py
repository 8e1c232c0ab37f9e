"""A metric's result from what the judge replied: one reply parsed (`parsed_fields`, juiz.judging.parsing), several
sampled
replies made one (`sampled_fields`, juiz.judging.samples), a check-based metric's result from its checks and rule
(`checks_result`, juiz.judging.check_rule). The judge (juiz.judging.judge) makes every metric's result with these; an
item's judgement is made of them in juiz.judging.judgements.
"""

from __future__ import annotations

from typing import Any

from juiz.engines.base import Completion, GenerationRequest
from juiz.judging.check_rule import apply_rule
from juiz.judging.checks import CheckJob
from juiz.judging.explain import explain
from juiz.judging.parsing import expected_score, parse_reply
from juiz.judging.samples import combine_samples
from juiz.judging.word_overlap import with_counted
from schemas import Provenance
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
    """`parsed_fields`, or with several replies (request.n > 1) their majority and spread (juiz.judging.samples)."""
    if request.n == 1:
        return parsed_fields(completion, request)
    replies = [completion, *completion.alternatives]
    return combine_samples([parsed_fields(c, request) for c in replies], request.temperature)


def checks_result(
    job: CheckJob, checks: list[CheckResult], reference: str | None, latency_s: float, provenance: Provenance
) -> MetricResult:
    """A check-based metric's result: the rule's grade (juiz.judging.check_rule), the checks (with the answer's word
    shares where the prompt reads them, and the checks it counts from the text), the reference."""
    checks = with_counted(job.template, checks, job.fields["question"], job.fields["answer"])
    common: dict[str, Any] = {
        "latency_s": latency_s,
        "provenance": provenance,
        "checks": checks,
        "reference": reference,
    }
    # Failed (not a parse error) when the engine failed every check the score is made of; info checks may still have
    # been read, e.g. checks-8's per-point checks, which hold the question and reference points but not the answer.
    # A check counted from the text never fails, so it doesn't count here.
    counted = {spec.name for spec in job.template.checks if spec.ask == "counted"}
    scored = [c for c in checks if c.role != "info" and c.name not in counted]
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
    # The grade in words for readers, in the item's language; raw_output keeps the rule's own line with every number.
    told = explain(job.template, checks, outcome)
    return MetricResult(
        status=MetricStatus.OK,
        score=outcome.score,
        normalized_score=round(outcome.score / 3, 6),
        expected_score=rounded(outcome.expected_score),
        strength=outcome.strength,
        criteria=told.criteria,
        supporting_evidence=told.supporting_evidence,
        raw_output=outcome.text,
        **common,
    )


def rounded(value: float | None) -> float | None:
    return None if value is None else round(min(max(value, 0.0), 1.0), 6)
