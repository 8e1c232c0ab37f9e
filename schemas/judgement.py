"""What juiz returns for one triple: the same fields from the CLI's JSONL and the API."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from schemas.triple import Label, Segment


class JudgementStatus(StrEnum):
    OK = "ok"
    PARSE_ERROR = "parse_error"  # the judge replied, but not in the template; raw_output keeps what it said
    FAILED = "failed"  # no usable reply (engine error, input too long, cancelled); `error` says why


class Provenance(BaseModel):
    """Which judge made this result, so results from different prompts or models are never mixed up."""

    model: str
    prompt: str = Field(description="metric@version.lang, e.g. answer_relevance@juiz-1.pt")
    prompt_sha256: str
    sampling: dict[str, Any]
    juiz_version: str


class Judgement(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    status: JudgementStatus
    score: int | None = Field(default=None, ge=0, le=3)
    normalized_score: float | None = Field(default=None, ge=0, le=1)
    expected_score: float | None = Field(
        default=None, ge=0, le=1, description="Σ p(k)·k / 3 over the score digit's probabilities."
    )
    criteria: str | None = None
    supporting_evidence: str | None = None
    raw_output: str | None = None
    manual_label: Label | None = None
    automated_label: str | None = None
    latency_s: float | None = None
    provenance: Provenance
    error: str | None = None
    question: str
    answer: str
    context: str | list[Segment] | None = None
