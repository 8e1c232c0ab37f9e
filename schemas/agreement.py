"""How well the judge agrees with manual labels: the report `juiz agreement` prints and the API returns."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from schemas.calibration import CalibrationFigures
from schemas.labels import VerdictLevel


class Interval(BaseModel):
    """A closed interval, e.g. a 95% bootstrap confidence interval."""

    low: float = Field(allow_inf_nan=False)
    high: float = Field(allow_inf_nan=False)

    @model_validator(mode="after")
    def _ordered(self) -> Interval:
        if self.low > self.high:
            raise ValueError(f"interval low {self.low} is above high {self.high}")
        return self


class Statistic(BaseModel):
    """One agreement figure. A figure that is undefined for the data is null with a reason, never NaN."""

    value: float | None = Field(default=None, allow_inf_nan=False)
    ci95: Interval | None = Field(default=None, description="Percentile bootstrap interval; null when too unstable.")
    reason: str | None = Field(default=None, description="Why value is null, e.g. 'only one class present', 'n < 2'.")

    @model_validator(mode="after")
    def _null_has_reason(self) -> Statistic:
        if self.value is None and not self.reason:
            raise ValueError("a null statistic needs a reason")
        return self


class Bootstrap(BaseModel):
    """How the confidence intervals were drawn, so a report can be reproduced exactly."""

    resamples: int = Field(ge=0)
    seed: int


class ShareEstimate(BaseModel):
    """One class's share of the answers (or a difference of two runs' shares), three ways."""

    label: str = Field(description="The class, e.g. C.")
    estimate: float | None = Field(
        default=None,
        allow_inf_nan=False,
        description="Prediction-powered estimate: the judge on every item, corrected by the labelled items.",
    )
    ci95: Interval | None = Field(default=None, description="Its 95% interval (Student's t, n − 1 degrees of freedom).")
    classical: float | None = Field(
        default=None, allow_inf_nan=False, description="The labelled items alone: their share."
    )
    classical_ci95: Interval | None = Field(default=None, description="The labelled items alone: 95% interval.")
    judge_only: float | None = Field(
        default=None,
        allow_inf_nan=False,
        description="The judge's own share on every item, uncorrected: biased by however the judge errs.",
    )
    tuning: float | None = Field(
        default=None, ge=0, le=1, description="PPI++ weight λ on the judge (0: the labels alone, 1: plain PPI)."
    )


class Shares(BaseModel):
    """Per class: the share of answers in it, estimated for all items of a batch (or the change between two runs of
    the same questions), valid when the labelled items are a random sample of the items."""

    of: Literal["share", "difference"] = Field(
        description="share: of one run's answers; difference: run b's share − run a's, question by question."
    )
    n_items: int = Field(ge=0, description="Items (or questions, for a difference) the estimate is about.")
    n_labelled: int = Field(
        ge=0, description="Items with a reference label (for a difference: labelled in both runs) that correct it."
    )
    n_ungraded: int = Field(
        default=0, ge=0, description="Items without a judge class (failed, parse error): kept, as no prediction."
    )
    reference: str = Field(description="Where the reference labels come from (the consensus rule, or manual_label).")
    method: str = Field(description="How the estimate and its interval are made.")
    shares: list[ShareEstimate] = Field(default_factory=list, description="One per class, worst first.")
    unavailable: str | None = Field(default=None, description="Why there is no estimate (too few labelled items…).")


class AnnotatorPair(BaseModel):
    """Two annotators on the items both labelled."""

    a: str
    b: str
    n: int = Field(ge=0, description="Items both labelled.")
    cohen_kappa: Statistic


class InterAnnotatorReport(BaseModel):
    """How far the annotators agree with one another, and the rule that made the reference labels."""

    annotators: list[str] = Field(description="Everyone who labelled, in order of name.")
    labels: dict[str, int] = Field(description="Items labelled per annotator.")
    items: int = Field(ge=0, description="Items with at least one label.")
    items_shared: int = Field(ge=0, description="Items with labels from two annotators or more.")
    krippendorff_alpha_ordinal: Statistic = Field(description="Over all annotators and items (missing labels allowed).")
    krippendorff_alpha_nominal: Statistic = Field(description="The same, every disagreement counted alike.")
    pairs: list[AnnotatorPair] = Field(description="Cohen's kappa for each two annotators.")
    consensus: str = Field(description="The rule that gives the reference label, in words.")
    consensus_items: int = Field(ge=0, description="Items the rule gives a reference label.")
    ties: int = Field(default=0, ge=0, description="Items the majority rule leaves without a label: a tie.")


class AgreementReport(BaseModel):
    """Judge vs manual labels over the items that have both a manual label and an `ok` judgement."""

    n: int = Field(ge=0, description="Items compared.")
    n_excluded: dict[str, int] = Field(
        default_factory=dict, description="Items left out, by why: no_manual_label, not_ok (parse_error or failed)."
    )
    classes: list[str] = Field(description="Class names, worst first: the order of the confusion matrix.")
    accuracy: Statistic
    cohen_kappa: Statistic
    cohen_kappa_quadratic: Statistic
    krippendorff_alpha_ordinal: Statistic
    spearman_rho: Statistic = Field(description="Manual class index vs the judge's 0–3 score.")
    kendall_tau: Statistic = Field(description="Manual class index vs the judge's 0–3 score (tau-b).")
    mae: Statistic = Field(description="Mean |manual − judge| on the 0–1 scale.")
    confusion_matrix: list[list[int]] = Field(description="Rows: manual class; columns: judge class.")
    bootstrap: Bootstrap
    calibration: CalibratedAgreement | None = Field(
        default=None,
        description="Raw vs calibrated (cross-fitted, held-out) agreement on the items a calibration can read; "
        "null when not asked for.",
    )
    reference: str = Field(
        default="manual_label",
        description="What the judge is compared with: each item's manual_label, or the consensus rule (in words) "
        "that made one label of several annotators'.",
    )
    annotators: InterAnnotatorReport | None = Field(
        default=None, description="Agreement among the annotators; null when the items carry no annotations."
    )
    shares: Shares | None = Field(
        default=None, description="Each class's share of the answers, prediction-powered; null when not asked for."
    )


class CalibratedAgreement(BaseModel):
    """A calibration fitted on these labels, judged honestly: each item's calibrated label comes from a model fit on
    the other folds only. `raw` and `calibrated` compare the same items (those with every feature)."""

    features: list[str] = Field(description="The judge signals fitted, in the model's order.")
    n: int = Field(ge=0, description="Labelled items with every feature.")
    n_missing_features: int = Field(default=0, ge=0, description="Labelled items left out: a feature was missing.")
    folds: int | None = None
    seed: int = 0
    unavailable: str | None = Field(
        default=None, description="Why there is no calibrated figure (too few labels, one class...): raw only."
    )
    raw: AgreementReport | None = Field(default=None, description="The judge's own labels on the same items.")
    calibrated: AgreementReport | None = None
    raw_figures: CalibrationFigures | None = Field(
        default=None, description="Brier/ECE of the raw label taken as certain (probability 1 on its class)."
    )
    calibrated_figures: CalibrationFigures | None = None


class AgreementByMetric(BaseModel):
    """Each judge signal against the same manual labels: a metric's score, its expected score, the verdict."""

    columns: dict[str, AgreementReport] = Field(
        description="metric, 'metric (expected)', 'verdict', 'verdict (expected)' → agreement report."
    )
    verdict: list[VerdictLevel] | None = Field(
        default=None, description="The rule the verdict columns used (the label mapping's, or juiz's default)."
    )
    calibration: CalibratedAgreement | None = Field(
        default=None, description="Raw vs calibrated (cross-fitted, held-out) agreement; null when not asked for."
    )
    reference: str = Field(default="manual_label", description="What the judge is compared with (as AgreementReport).")
    annotators: InterAnnotatorReport | None = Field(
        default=None, description="Agreement among the annotators; null when the items carry no annotations."
    )
    shares: Shares | None = Field(
        default=None, description="Each class's share of the answers, prediction-powered; null when not asked for."
    )


AgreementReport.model_rebuild()
AgreementByMetric.model_rebuild()
