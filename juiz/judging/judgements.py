"""What a judgement is made of: the item's metric results (juiz.judging.metric_results) under `metrics`, the main
metric's
grade on top (`judgement_of`), a cached grade made this item's (`from_cache`), and what the batch makes of a grade,
fresh or cached (`finished`: its label, calibration and uncertainty). What each metric records as its provenance is its
plan's (juiz.judging.plan).

`failed_judgement` is the result of an item that could not be graded at all, with the reason and the judge meant
for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import prompts
from juiz.agreement.labels import (
    class_index,
    label_for,
    label_rule,
    label_source,
    metric_value,
    verdict_score,
)
from juiz.calibration.grades import apply_calibration
from juiz.judging.explain import verdict_in_words
from juiz.judging.uncertainty import mark
from schemas import BatchOptions, Judgement, JudgementStatus, Provenance, Triple
from schemas.judgement import MetricResult, MetricStatus
from schemas.labels import LabelMapping


def judgement_of(triple: Triple, options: BatchOptions, metrics: dict[str, MetricResult]) -> Judgement:
    """The result: the main metric's grade in the top-level fields, every metric under `metrics`; not yet `finished`
    (which puts the verdict there when the label mapping's rule reads several metrics)."""
    main = metrics[options.primary_metric]
    assert main.provenance is not None
    return Judgement(
        **item_fields(triple),
        **_grade_of(main),
        raw_output=main.raw_output,
        latency_s=main.latency_s,
        provenance=main.provenance,
        metrics=metrics,
        samples=main.samples,
    )


def _grade_of(main: MetricResult) -> dict[str, Any]:
    """The top-level grade fields as one metric gives them."""
    status = JudgementStatus.FAILED if main.status is MetricStatus.SKIPPED else JudgementStatus(main.status.value)
    return {
        "status": status,
        "score": main.score,
        "normalized_score": main.normalized_score,
        "expected_score": main.expected_score,
        "criteria": main.criteria,
        "supporting_evidence": main.supporting_evidence,
        "error": main.error,
    }


def verdict_grade(judgement: Judgement, rule: LabelMapping) -> dict[str, Any]:
    """The top-level grade fields as the verdict rule gives them (`label_rule`).

    The score is `verdict_score`; the expected score is the lowest of the rule's metrics' (an answer is as good as its
    weakest side). A metric of the rule without an ok grade makes the item's status its status: never a verdict made
    up from a missing grade."""
    assert rule.verdict is not None and judgement.metrics is not None
    named = list(dict.fromkeys(m for level in rule.verdict for m in level.when))
    results = {m: judgement.metrics[m] for m in named}
    described = "; ".join(
        f"{level.label} if " + " and ".join(f"{m} >= {v:g}" for m, v in level.when.items()) for level in rule.verdict
    )
    criteria = f"verdict: {described}; otherwise {rule.classes[0].name}"
    not_ok = [(m, r) for m, r in results.items() if r.status is not MetricStatus.OK or r.score is None]
    if not_ok:
        failed = any(r.status is not MetricStatus.PARSE_ERROR for _, r in not_ok)
        return {
            "status": JudgementStatus.FAILED if failed else JudgementStatus.PARSE_ERROR,
            "score": None,
            "normalized_score": None,
            "expected_score": None,
            "criteria": criteria,
            "supporting_evidence": None,
            "error": "; ".join(f"{m}: {r.error or r.status.value}" for m, r in not_ok),
        }
    index, score = class_index(judgement, rule), verdict_score(judgement, rule)
    assert index is not None and score is not None  # every metric of the rule is graded
    expected = [r.expected_score for r in results.values()]
    grades = ", ".join(f"{m} {r.score}" for m, r in results.items())
    # Each grade as the rule read it (its discrete score where an expected score is missing).
    values = {
        m: value if (value := metric_value(r, rule.signal)) is not None else float(r.score or 0)
        for m, r in results.items()
    }
    provenance = next((r.provenance for r in results.values() if r.provenance is not None), None)
    lang = (prompts.parse_prompt_id(provenance.prompt)[2] if provenance is not None else None) or "en"
    label = rule.classes[index].name
    words = verdict_in_words([c.name for c in rule.classes], rule.verdict, label, values, lang)
    return {
        "status": JudgementStatus.OK,
        "score": score,
        "normalized_score": round(score / 3, 6),
        "expected_score": None if None in expected else min(e for e in expected if e is not None),
        "criteria": criteria,
        "supporting_evidence": f"{words} ({grades} → {label})",
        "error": None,
    }


def finished(judgement: Judgement, options: BatchOptions) -> Judgement:
    """What the batch makes of a grade, fresh or cached alike (the cache keeps none of it), in the order each step
    reads the one before: the top-level grade and label (the label mapping: its verdict rule, or one metric's
    grade: `label_source` says which), the calibrated grade (options.calibration), then how uncertain the result is
    (which reads the calibrated grade, or the expected score near the mapping's cuts). Made from the metrics alone,
    so finishing a result again under another mapping gives that mapping's result."""
    mapping = options.label_mapping
    rule = label_rule(judgement, mapping)
    if rule is not None:
        judgement = judgement.model_copy(update=verdict_grade(judgement, rule))
    elif judgement.metrics and options.primary_metric in judgement.metrics:
        judgement = judgement.model_copy(update=_grade_of(judgement.metrics[options.primary_metric]))
    judgement.label_source = label_source(judgement, mapping)
    judgement.automated_label = label_for(judgement, mapping)
    apply_calibration(judgement, options.calibration)
    return mark(judgement, mapping)


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
    """A cached grade (juiz.judging.result_cache.cacheable) as this item's result: its own fields, marked `cached`, not
    yet `finished` (its batch's label mapping and calibration apply, never the cached batch's)."""
    return Judgement.model_validate({**item_fields(triple), **cached, "cached": True})


def failed_judgement(
    triple: Triple, options: BatchOptions, reason: str, provenance: Mapping[str, Provenance]
) -> Judgement:
    """A `failed` result for an item that could not be graded at all, with the reason and, for each metric, the
    judge meant for it (`provenance`: juiz.judging.plan.PlannedItem.provenance, or provenance_by_metric)."""
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
