"""How sure a result is: the spread of several sampled replies, and whether the item is worth a human look."""

from __future__ import annotations

from pydantic import BaseModel, Field


class SampleSummary(BaseModel):
    """n sampled CoT replies to the same prompt (`options.samples`), summarised. Replies that failed or did not
    parse count in `n` and against `majority_share`, never as a score."""

    n: int = Field(ge=1, description="Replies drawn.")
    temperature: float = Field(ge=0)
    scores: list[int | None] = Field(description="Each reply's 0–3 score (null: failed or not parsed).")
    mean: float | None = Field(default=None, description="Mean 0–3 score over the parsed replies.")
    majority: int | None = Field(default=None, description="Most frequent score (ties: the lower score).")
    std: float | None = Field(default=None, ge=0, description="Population standard deviation of the scores (0–3).")
    majority_share: float = Field(ge=0, le=1, description="Share of the n replies that gave the majority score.")


class Uncertainty(BaseModel):
    """Why a result is (or is not) flagged `uncertain`; `score` orders results, most uncertain first."""

    score: float = Field(ge=0, le=1, description="The largest of the components below; 0 = sure.")
    reasons: list[str] = Field(default_factory=list, description="The rules that flagged the result, if any.")
    dispersion: float | None = Field(default=None, ge=0, le=1, description="1 − majority_share of the samples.")
    calibrated_doubt: float | None = Field(
        default=None, ge=0, le=1, description="1 − the calibrated probability of the calibrated label."
    )
    boundary: float | None = Field(
        default=None, ge=0, le=1, description="Closeness of 3 × expected score to the nearest label cut point."
    )
    veto: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Closeness of a check-based metric's weakest veto check to the rule's threshold (1 = on it).",
    )
