"""Batch-level types shared by the API and the workers."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.labels import LabelMapping
from schemas.triple import Triple


class BatchOptions(BaseModel):
    """How a batch is graded. Every field has a default, so `{}` is a valid options object."""

    # A misspelt option ({"mdoe": "fast"}) is a 422 naming it, not a batch silently graded with the default.
    model_config = ConfigDict(extra="forbid")

    metric: Literal["answer_relevance"] = "answer_relevance"
    prompt: str | None = Field(
        default=None, description="Prompt id, e.g. answer_relevance@juiz-1; default: the metric's default version."
    )
    lang: Literal["auto", "en", "pt"] = Field(default="auto", description="Prompt language; auto picks per question.")
    mode: Literal["cot", "fast"] = Field(
        default="cot",
        description="cot: the judge writes Criteria / Supporting Evidence / Score; fast: one forward pass, score only.",
    )
    label_mapping: LabelMapping = Field(default_factory=LabelMapping)


class BatchSubmission(BaseModel):
    items: list[Triple] = Field(min_length=1)
    options: BatchOptions = Field(default_factory=BatchOptions)


class BatchStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class BatchCounts(BaseModel):
    total: int
    done: int = 0
    ok: int = 0
    parse_error: int = 0
    failed: int = 0
