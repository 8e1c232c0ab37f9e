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

from juiz.agreement.labels import label_for
from juiz.calibration.grades import apply_calibration
from juiz.judging.uncertainty import mark
from schemas import BatchOptions, Judgement, JudgementStatus, Provenance, Triple
from schemas.judgement import MetricResult, MetricStatus


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
