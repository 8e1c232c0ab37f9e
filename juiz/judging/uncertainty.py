"""How sure a result is, and which results a person should look at first. (How several sampled replies make one
result, and the spread it records, is juiz.judging.samples.)

A result is `uncertain` (worth a human label) when any of these holds (docs/explanation/calibration.md):
- dispersion: fewer than 2/3 of its sampled replies agree with the majority score (n > 1 only);
- calibration: the calibrated probability of its calibrated label is below 0.6 (with `options.calibration`);
- boundary: without a calibration, 3 × its expected score lies within 0.25 of one of the label mapping's cut points
  (0.5 and 2.5 by default: between I and P, and between P and C);
- veto: a metric graded by a check-based prompt whose weakest veto check lies within 0.05 of its threshold (the
  rule's `veto_below`; for a check read against a baseline, the rule's margin above it): its grade is 0 or the
  unvetoed score on a hair (the same item graded twice, once with a warm prefix cache, read
  0.47 and 0.50 of a veto at 0.5, and its grade went from 0 to 3).
`uncertainty.score` (0–1) is the largest component, so results can be listed most uncertain first.
"""

from __future__ import annotations

from collections.abc import Sequence

import prompts
from juiz.judging.check_rule import veto_distance
from schemas.judgement import Judgement, MetricStatus
from schemas.labels import LabelMapping
from schemas.uncertainty import Uncertainty

MIN_MAJORITY_SHARE = 2 / 3  # below: the replies disagree
MIN_CALIBRATED_PROBABILITY = 0.6  # below: the calibration is unsure of its label
BOUNDARY_MARGIN = 0.25  # on the 0–3 scale: this close to a cut point, the label could go either way
VETO_MARGIN = 0.05  # a veto check's value this close to the rule's threshold: vetoed or not by the engine's noise


def assess(judgement: Judgement, mapping: LabelMapping) -> Uncertainty | None:
    """The uncertainty of one result (see the module docstring); None for a result without a grade."""
    if judgement.score is None and judgement.calibrated is None:
        return None
    reasons: list[str] = []
    dispersion = calibrated_doubt = boundary = None
    if judgement.samples is not None and judgement.samples.n > 1:
        dispersion = round(1 - judgement.samples.majority_share, 6)
        if judgement.samples.majority_share < MIN_MAJORITY_SHARE:
            reasons.append(
                f"samples disagree: {judgement.samples.majority_share:.0%} gave the majority score "
                f"(under {MIN_MAJORITY_SHARE:.0%})"
            )
    calibrated = judgement.calibrated
    if calibrated is not None and calibrated.probabilities is not None and calibrated.label is not None:
        top = calibrated.probabilities[calibrated.label]
        calibrated_doubt = round(1 - top, 6)
        if top < MIN_CALIBRATED_PROBABILITY:
            reasons.append(
                f"calibrated label {calibrated.label} has p = {top:.2f} (under {MIN_CALIBRATED_PROBABILITY})"
            )
    elif judgement.expected_score is not None and mapping.verdict is None:
        value = 3 * judgement.expected_score
        cut = min(mapping.cut_points(), key=lambda c: abs(value - c))
        distance = abs(value - cut)
        boundary = round(max(0.0, 1 - distance / (2 * BOUNDARY_MARGIN)), 6)
        if distance < BOUNDARY_MARGIN:
            reasons.append(f"3 × expected score {value:.2f} is within {BOUNDARY_MARGIN} of the cut point {cut:g}")
    veto = _veto_closeness(judgement, reasons)
    components = [c for c in (dispersion, calibrated_doubt, boundary, veto) if c is not None]
    return Uncertainty(
        score=max(components, default=0.0),
        reasons=reasons,
        dispersion=dispersion,
        calibrated_doubt=calibrated_doubt,
        boundary=boundary,
        veto=veto,
    )


def _veto_closeness(judgement: Judgement, reasons: list[str]) -> float | None:
    """How close the nearest metric's veto gate is to its threshold (1 = on it; None: no check-based veto read);
    adds the reason when it is within VETO_MARGIN."""
    closest: float | None = None
    for name, result in (judgement.metrics or {}).items():
        template = (
            prompts.template_for(result.provenance.prompt if result.provenance else None)
            if result.status is MetricStatus.OK and result.checks
            else None
        )
        if template is None or template.rule is None:
            continue
        weakest = veto_distance(template, result.checks or [])
        if weakest is None:
            continue
        check, signed = weakest
        distance = abs(signed)
        closest = max(closest or 0.0, round(max(0.0, 1 - distance / (2 * VETO_MARGIN)), 6))
        if distance < VETO_MARGIN:
            verdict = "sinks" if signed < 0 else "keeps"
            reasons.append(
                f"{name}'s veto {check} {verdict} it by {distance:.2f} (within {VETO_MARGIN} of its threshold)"
            )
    return closest


def mark(judgement: Judgement, mapping: LabelMapping) -> Judgement:
    """Say how uncertain a result is (`uncertainty`, and `uncertain` when any reason holds); read after its label and
    calibration (juiz.judging.judgements.finished)."""
    judgement.uncertainty = assess(judgement, mapping)
    judgement.uncertain = None if judgement.uncertainty is None else bool(judgement.uncertainty.reasons)
    return judgement


def uncertain_first(judgements: Sequence[Judgement]) -> list[Judgement]:
    """Most uncertain first (flagged before unflagged, then by score); results without a grade last; stable."""
    return sorted(judgements, key=uncertainty_rank)


def uncertainty_rank(judgement: Judgement) -> float:
    """Where a result goes in the most-uncertain-first order, lowest first: flagged results in [0, 1), unflagged in
    [2, 3), results without a grade at 4 (the store keeps this as the score of the batch's sorted-set index)."""
    if judgement.uncertainty is None:
        return 4.0
    return (0.0 if judgement.uncertain else 2.0) + (1.0 - judgement.uncertainty.score)


def format_uncertain(judgements: Sequence[Judgement], mapping: LabelMapping, limit: int = 20) -> str:
    """The `limit` most uncertain results, one line each: id, score, labels, and why it is flagged."""
    judgements = [_assessed(j, mapping) if j.uncertainty is None else j for j in judgements]  # older results
    ranked = [j for j in uncertain_first(judgements) if j.uncertainty is not None][:limit]
    flagged = sum(1 for j in judgements if j.uncertain)
    lines = [f"most uncertain first ({flagged} of {len(judgements)} flagged uncertain; showing {len(ranked)})"]
    for j in ranked:
        assert j.uncertainty is not None
        calibrated = f" calibrated {j.calibrated.label}" if j.calibrated and j.calibrated.label else ""
        why = "; ".join(j.uncertainty.reasons) or "not flagged"
        lines.append(
            f"  {j.id}: uncertainty {j.uncertainty.score:.2f}, score {j.score}, judge {j.automated_label}{calibrated}, "
            f"manual {j.manual_label if j.manual_label is not None else '-'} ({why})"
        )
    return "\n".join(lines)


def _assessed(judgement: Judgement, mapping: LabelMapping) -> Judgement:
    return mark(judgement.model_copy(), mapping)
