"""Runs side by side (GET /v1/compare, `juiz compare`): the items they share, each run's agreement with the labels on
those items, each statistic's difference with a paired bootstrap interval, McNemar's test on the verdicts, the items
fixed and regressed, and the prediction-powered change of each class's share."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from schemas.agreement import AgreementReport, Interval, Shares
from schemas.triple import Label

# How a verdict moved between the runs, measured against the item's label (distance in classes, e.g. I→P→C):
# fixed: closer; regressed: further; sideways: another verdict as far from the same label (I ↔ C over a P); unchanged:
# as far as before otherwise (the same verdict, or each run's verdict as far from its own answer's label).
Movement = Literal["fixed", "regressed", "unchanged", "sideways"]


class ComparedItem(BaseModel):
    """One item both runs graded."""

    id: str = Field(description="The item's id (batch a's, when the runs were matched by content).")
    index_a: int = Field(description="0-based position of the item in batch a")
    index_b: int = Field(description="0-based position of the item in batch b")
    manual_label: Label | None = Field(description="The label run a's item is compared with (run b's when it differs)")
    manual_label_b: Label | None = Field(
        default=None, description="Run b's label when its triple differs from run a's (another answer), else null"
    )
    score_a: int | None
    score_b: int | None
    delta: int | None = Field(description="score_b − score_a on 0–3; null when either is missing")
    label_a: str | None = Field(description="the judge's class in batch a")
    label_b: str | None = Field(description="the judge's class in batch b")
    movement: Movement | None = Field(
        default=None, description="How the verdict moved against the label; null without a label or a verdict"
    )


class PairedDifference(BaseModel):
    """One agreement statistic: run b's value − run a's, on the same items, with a paired bootstrap interval (items
    resampled once, both runs' statistic computed on the same resample)."""

    a: float | None = Field(default=None, allow_inf_nan=False)
    b: float | None = Field(default=None, allow_inf_nan=False)
    difference: float | None = Field(default=None, allow_inf_nan=False, description="b − a")
    ci95: Interval | None = Field(default=None, description="Percentile paired bootstrap interval of b − a")
    reason: str | None = Field(default=None, description="Why the difference is null")


class McNemarTest(BaseModel):
    """Are the two runs' verdicts right (equal to the label's class) equally often? On the items both graded."""

    n: int = Field(ge=0, description="Items with a label and a verdict in both runs")
    only_a_right: int = Field(ge=0, description="Discordant items: run a right, run b wrong")
    only_b_right: int = Field(ge=0, description="Discordant items: run b right, run a wrong")
    method: Literal["exact binomial", "chi-square with continuity correction"] = Field(
        description="Exact binomial below 25 discordant items, else the chi-square approximation"
    )
    statistic: float | None = Field(default=None, allow_inf_nan=False, description="The chi-square statistic")
    p_value: float = Field(ge=0, le=1, description="Two-sided; 1 with no discordant item")


class CompareReport(BaseModel):
    """Run b against run a (the baseline)."""

    a: str = Field(description="run a's id (a batch id, or a file)")
    b: str = Field(description="run b's id")
    matched_by: Literal["id", "content"] = Field(
        default="id", description="How items were paired: their ids, or the triple's content key"
    )
    shared: int = Field(description="items graded in both runs")
    only_a: int
    only_b: int
    agreement_a: AgreementReport = Field(description="batch a against the manual labels, on the shared items")
    agreement_b: AgreementReport = Field(description="batch b against the same labels, on the same items")
    paired: int = Field(default=0, ge=0, description="Shared items with a label and a verdict in both runs")
    differences: dict[str, PairedDifference] = Field(
        default_factory=dict, description="Each agreement statistic (as in AgreementReport): b − a on the paired items"
    )
    mcnemar: McNemarTest | None = Field(default=None, description="McNemar's test on the paired items' verdicts")
    fixed: list[str] = Field(default_factory=list, description="Ids whose verdict moved toward the label")
    regressed: list[str] = Field(default_factory=list, description="Ids whose verdict moved away from the label")
    unchanged: list[str] = Field(
        default_factory=list, description="Ids whose verdict is as far from the label as before (mostly the same)"
    )
    sideways: list[str] = Field(
        default_factory=list, description="Ids whose verdict changed but stayed as far from the label"
    )
    shares_difference: Shares | None = Field(
        default=None, description="Each class's share, run b − run a, prediction-powered; null when not asked for"
    )
    score_deltas: dict[str, int] = Field(
        description="shared items per score delta (b − a, from -3 to 3), and 'missing' when either has no score"
    )
    changed: list[ComparedItem] = Field(description="shared items whose judge label differs between the runs")


class RunSummary(BaseModel):
    """One run of an experiment."""

    id: str
    items: int = Field(ge=0)
    graded: int = Field(ge=0, description="Items with an ok grade")


class ExperimentReport(BaseModel):
    """Two runs or more on the same items: each against the baseline (the first)."""

    baseline: str
    runs: list[RunSummary]
    comparisons: list[CompareReport] = Field(description="Run 2 vs the baseline, run 3 vs the baseline, …")
