"""Put manual labels and judge scores on the same ordinal classes, so they can be compared.

Manual labels arrive in many spellings: class names and aliases ("C", "partial", "PC"), numbers on the judge's 0–3
scale, or numbers on a normalised 0–1 scale, sometimes as strings read from a CSV. Everything here turns them into an
index into `LabelMapping.classes` (worst first), which is what the agreement statistics compare.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from typing import Literal

from juiz.runtime.errors import InputError
from schemas.judgement import Judgement, MetricResult, MetricStatus
from schemas.labels import LabelMapping, VerdictLevel
from schemas.triple import Label

NumericScale = Literal["0-3", "0-1"]

_SCALE_MAX: dict[str, float] = {"0-3": 3.0, "0-1": 1.0}


def _class_by_name(text: str, mapping: LabelMapping) -> int | None:
    """The class whose name or alias is `text`, ignoring case and surrounding blanks."""
    wanted = text.strip().casefold()
    for index, cls in enumerate(mapping.classes):
        if wanted in (spelling.strip().casefold() for spelling in (cls.name, *cls.aliases)):
            return index
    return None


def _as_number(label: Label) -> float | None:
    """The label as a finite number, or None. Numeric strings count: CSV readers hand "2" over as text."""
    if isinstance(label, bool):  # bool is an int subclass, but True is not a grade
        return None
    if isinstance(label, int | float):
        value = float(label)
    else:
        try:
            value = float(label.strip())
        except ValueError:
            return None
    return value if math.isfinite(value) else None


def _known_labels(mapping: LabelMapping) -> str:
    spellings = [spelling for cls in mapping.classes for spelling in (cls.name, *cls.aliases)]
    return ", ".join(repr(s) for s in spellings) + ", or a number on the 0–3 or 0–1 scale"


def _round_half_up(value: float) -> int:
    """Nearest integer, halves going up: Python's `round` sends 0.5 to 0 and 2.5 to 2, which no grader would expect."""
    return math.floor(value + 0.5)


def _parse(label: Label, mapping: LabelMapping) -> int | float:
    """A class index (int) for a named label, a float for a numeric one. Names win over numbers."""
    if isinstance(label, str):
        index = _class_by_name(label, mapping)
        if index is not None:
            return index
    number = _as_number(label)
    if number is None:
        raise InputError(f"unknown label {label!r}; known labels: {_known_labels(mapping)}", field="manual_label")
    return number


def _checked_number(number: float, label: Label, mapping: LabelMapping, scale: NumericScale) -> float:
    if not 0.0 <= number <= _SCALE_MAX[scale]:
        raise InputError(
            f"label {label!r} is outside the {scale} scale; known labels: {_known_labels(mapping)}",
            field="manual_label",
        )
    return number


def class_of_score(score: int, mapping: LabelMapping) -> int:
    """Index of the class whose `scores` contain the judge's 0–3 score."""
    for index, cls in enumerate(mapping.classes):
        if score in cls.scores:
            return index
    raise ValueError(f"score {score!r} is not on the 0–3 scale")


def automated_label(score: int | None, mapping: LabelMapping) -> str | None:
    """The class name the judge's score falls in, written next to the manual label; None when there is no score."""
    if score is None:
        return None
    return mapping.classes[class_of_score(score, mapping)].name


# The verdict `juiz agreement --by-metric` shows when the label mapping has no rule of its own, and the rule the
# benchmark reports: the manual labels judge the answer as a whole against the question AND the context, so a correct
# answer must both answer the question and be supported; a relevant answer with unsupported parts is partial.
# Minimums on the 0–3 scale; bench/judge_quality.py measures it on the labelled set.
DEFAULT_VERDICT: tuple[VerdictLevel, ...] = (
    VerdictLevel(label="C", when={"answer_relevance": 2.5, "groundedness": 2.5}),
    VerdictLevel(label="P", when={"answer_relevance": 1.5, "groundedness": 1.5}),
)


# The verdict over the triad when completeness is graded too: answer relevance then says only whether the answer
# addresses the question, completeness how much of a complete answer it states, groundedness whether the context
# supports it. A correct answer does all three. A partial one addresses the question and is supported but leaves
# points out, so completeness does not gate P. A relevant answer the context only partly supports is I: on the
# labelled dev split most answers this judge finds only partly supported are false ones (bench.regrade measures it).
TRIAD_VERDICT: tuple[VerdictLevel, ...] = (
    VerdictLevel(label="C", when={"answer_relevance": 2.5, "completeness": 2.5, "groundedness": 2.5}),
    VerdictLevel(label="P", when={"answer_relevance": 1.5, "groundedness": 2.5}),
)


def default_verdict(graded: Collection[str] = ()) -> tuple[VerdictLevel, ...]:
    """The verdict rule for results graded for these metrics: TRIAD_VERDICT when completeness is among them, else
    DEFAULT_VERDICT."""
    return TRIAD_VERDICT if "completeness" in graded else DEFAULT_VERDICT


def with_default_verdict(mapping: LabelMapping, graded: Collection[str] = ()) -> LabelMapping:
    """The mapping with the default verdict (`default_verdict` of the `graded` metrics) as its rule when it has none
    (and its classes include C and P)."""
    names = {c.name for c in mapping.classes}
    if mapping.verdict is not None or not {"C", "P"} <= names:
        return mapping
    return mapping.model_copy(update={"verdict": list(default_verdict(graded))})


def metric_value(result: MetricResult | None, signal: str) -> float | None:
    """A metric's grade on the 0–3 scale: its discrete score, or 3 × its expected score; None without an ok grade."""
    if result is None or result.status is not MetricStatus.OK:
        return None
    if signal == "expected_score":
        return None if result.expected_score is None else 3.0 * result.expected_score
    return None if result.score is None else float(result.score)


def class_of_value(value: float, mapping: LabelMapping) -> int:
    """Index of the class a 0–3 value falls in, by the mapping's cut points (for expected scores)."""
    ordered = sorted(range(len(mapping.classes)), key=lambda i: min(mapping.classes[i].scores))
    position = sum(value >= cut for cut in mapping.cut_points())
    return ordered[position]


def metric_of(judgement: Judgement, metric: str) -> MetricResult | None:
    """One metric's result; results written before `metrics` existed hold answer relevance at the top level only."""
    if judgement.metrics is not None:
        return judgement.metrics.get(metric)
    if metric != "answer_relevance":
        return None
    return MetricResult(
        status=MetricStatus(judgement.status.value),
        score=judgement.score,
        normalized_score=judgement.normalized_score,
        expected_score=judgement.expected_score,
    )


def main_metric(judgement: Judgement) -> str:
    """The metric in the top-level fields: answer_relevance when graded, else the first one graded."""
    if not judgement.metrics or "answer_relevance" in judgement.metrics:
        return "answer_relevance"
    return next(iter(judgement.metrics))


VERDICT = "verdict"


def label_rule(judgement: Judgement, mapping: LabelMapping) -> LabelMapping | None:
    """The mapping with the verdict rule that labels this result, or None when one metric's grade labels it.

    The mapping's own rule, when it has one. Otherwise, unless the mapping names the one metric to read, the default
    verdict (DEFAULT_VERDICT; TRIAD_VERDICT when completeness was graded) when the result was graded for every metric it
    names: an answer is judged as a whole (relevant AND supported, and complete when completeness is asked), so
    relevance alone must not make an unsupported answer C. A result whose groundedness was skipped (no context) is
    labelled by its main metric: the rule can't read a grade that was never asked."""
    if mapping.verdict is not None:
        return mapping
    if mapping.metric is not None or not judgement.metrics:
        return None
    graded = [m for m, r in judgement.metrics.items() if r.status is not MetricStatus.SKIPPED]
    rule = with_default_verdict(mapping, graded)
    needed = {m for level in rule.verdict or [] for m in level.when}
    if not needed or not needed <= judgement.metrics.keys():
        return None
    if any(judgement.metrics[m].status is MetricStatus.SKIPPED for m in needed):
        return None
    return rule


def label_source(judgement: Judgement, mapping: LabelMapping) -> str:
    """What gives the result's automated label and top-level grade: VERDICT, or the metric read alone."""
    if label_rule(judgement, mapping) is not None:
        return VERDICT
    return mapping.metric or main_metric(judgement)


def _verdict_index(judgement: Judgement, rule: LabelMapping) -> int | None:
    assert rule.verdict is not None
    values: dict[str, float] = {}
    for metric in {m for level in rule.verdict for m in level.when}:
        value = metric_value(metric_of(judgement, metric), rule.signal)
        if value is None:
            return None  # never a label made up from a missing grade
        values[metric] = value
    names = [c.name for c in rule.classes]
    for level in rule.verdict:
        if all(values[m] >= minimum for m, minimum in level.when.items()):
            return names.index(level.label)
    return 0


def verdict_score(judgement: Judgement, rule: LabelMapping) -> int | None:
    """The verdict's 0–3 score (`rule` from `label_rule`): the lowest of its metrics' scores, kept within the verdict
    class's scores, so the score and the label always name the same class; None when the rule can't be read."""
    index = _verdict_index(judgement, rule)
    if index is None:
        return None
    assert rule.verdict is not None
    named = {m for level in rule.verdict for m in level.when}
    lowest = min((r.score or 0) if (r := metric_of(judgement, m)) is not None else 0 for m in named)
    scores = rule.classes[index].scores
    return min(max(lowest, min(scores)), max(scores))


def class_index(judgement: Judgement, mapping: LabelMapping) -> int | None:
    """The automated class of one result under the mapping: from its verdict rule (`label_rule`), else from one
    metric's grade."""
    rule = label_rule(judgement, mapping)
    if rule is not None:
        return _verdict_index(judgement, rule)
    value = metric_value(metric_of(judgement, mapping.metric or main_metric(judgement)), mapping.signal)
    if value is None:
        return None
    if mapping.signal == "expected_score":
        return class_of_value(value, mapping)
    return class_of_score(int(value), mapping)


def label_for(judgement: Judgement, mapping: LabelMapping) -> str | None:
    """The automated label written next to the manual one; None when the grades it needs are missing."""
    index = class_index(judgement, mapping)
    return None if index is None else mapping.classes[index].name


def resolve_numeric_scale(labels: Iterable[Label | None], mapping: LabelMapping) -> NumericScale:
    """Which scale numeric labels are on. `auto` reads them as 0–1 only when that is the sole sensible reading.

    A data set of 0s and 1s is ambiguous, so it stays on the judge's 0–3 scale unless a fraction such as 0.5 shows
    that the labels are normalised. Labels that are neither names nor numbers are skipped here and reported later
    by `class_of_label`.
    """
    if mapping.numeric_scale != "auto":
        return "0-1" if mapping.numeric_scale == "0-1" else "0-3"
    numbers = []
    for label in labels:
        if label is None or (isinstance(label, str) and _class_by_name(label, mapping) is not None):
            continue
        number = _as_number(label)
        if number is not None:
            numbers.append(number)
    if numbers and all(0.0 <= x <= 1.0 for x in numbers) and any(not x.is_integer() for x in numbers):
        return "0-1"
    return "0-3"


def check_labels(labels: Sequence[Label | None], mapping: LabelMapping) -> None:
    """Every label a class name or alias of the mapping, or a number on its scale; else InputError naming the value,
    with `line` the 0-based position of the first bad one. Checked where items come in: an unknown label accepted
    there would make every agreement and calibration of those items fail later."""
    scale = resolve_numeric_scale(labels, mapping)
    for position, label in enumerate(labels):
        if label is None:
            continue
        try:
            class_of_label(label, mapping, scale)
        except InputError as exc:
            raise InputError(exc.message, line=position, field="manual_label") from None


def class_of_label(label: Label, mapping: LabelMapping, numeric_scale_resolved: NumericScale) -> int:
    """Index into `mapping.classes` for a manual label; raises `InputError(field="manual_label")` if it is unknown.

    Numbers go to the class holding their nearest 0–3 score: on the 0–1 scale, x becomes round(3·x) first.
    """
    parsed = _parse(label, mapping)
    if isinstance(parsed, int):
        return parsed
    number = _checked_number(parsed, label, mapping, numeric_scale_resolved)
    return class_of_score(_round_half_up(number * 3.0 / _SCALE_MAX[numeric_scale_resolved]), mapping)


def label_unit_value(label: Label, mapping: LabelMapping, scale: NumericScale) -> float:
    """The label as a 0–1 value, comparable with `Judgement.normalized_score` (for the mean absolute error).

    Numbers keep their precision (2 on 0–3 is 0.667); a named class stands for the mean of its scores, so with the
    default mapping C is 1.0, P is 0.5 and I is 0.0.
    """
    parsed = _parse(label, mapping)
    if isinstance(parsed, int):
        scores = mapping.classes[parsed].scores
        return sum(scores) / len(scores) / 3.0
    return _checked_number(parsed, label, mapping, scale) / _SCALE_MAX[scale]
