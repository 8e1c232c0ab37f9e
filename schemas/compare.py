"""Two runs side by side (GET /v1/compare): the items they share by id, each run's agreement with the manual labels
on those items, the score deltas and the items whose judge label changed."""

from __future__ import annotations

from pydantic import BaseModel, Field

from schemas.agreement import AgreementReport
from schemas.triple import Label


class ComparedItem(BaseModel):
    """One item both runs graded (matched by id; the first of a repeated id)."""

    id: str
    index_a: int = Field(description="0-based position of the item in batch a")
    index_b: int = Field(description="0-based position of the item in batch b")
    manual_label: Label | None = Field(description="batch a's manual label, else batch b's")
    score_a: int | None
    score_b: int | None
    delta: int | None = Field(description="score_b − score_a on 0–3; null when either is missing")
    label_a: str | None = Field(description="the judge's class in batch a")
    label_b: str | None = Field(description="the judge's class in batch b")


class CompareReport(BaseModel):
    a: str = Field(description="batch a's id")
    b: str = Field(description="batch b's id")
    shared: int = Field(description="items graded in both, matched by id")
    only_a: int
    only_b: int
    agreement_a: AgreementReport = Field(description="batch a against the manual labels, on the shared items")
    agreement_b: AgreementReport = Field(description="batch b against the same labels, on the same items")
    score_deltas: dict[str, int] = Field(
        description="shared items per score delta (b − a, from -3 to 3), and 'missing' when either has no score"
    )
    changed: list[ComparedItem] = Field(description="shared items whose judge label differs between the runs")
