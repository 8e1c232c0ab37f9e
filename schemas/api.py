"""Request and response bodies of the HTTP API (the batch submission itself is `schemas.batch.BatchSubmission`)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from schemas.batch import BatchCounts, BatchName, BatchOptions, BatchStatus
from schemas.judgement import Judgement
from schemas.triple import Triple


class BatchLinks(BaseModel):
    self: str
    results: str
    agreement: str
    agreement_by_metric: str
    calibration: str
    report: str
    events: str = Field(description="Progress as Server-Sent Events (GET /v1/batches/{id}/events).")


class BatchView(BaseModel):
    """A batch as the API shows it: where it is, how far, how fast."""

    id: str
    name: str | None = Field(default=None, description="The batch's name (PATCH /v1/batches/{id} sets it).")
    status: BatchStatus
    counts: BatchCounts
    options: BatchOptions
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    cancelled_at: datetime | None = None
    judgements_per_s: float | None = Field(
        default=None, description="Items finished per second since the first started."
    )
    eta_s: float | None = Field(
        default=None,
        description="Seconds left at the rate so far: of the conversations' work once workers report them (each "
        "conversation weighed by the characters it adds past a prefix shared with one before it, and its reply "
        "allowance: a reference costs far more than a yes/no check), else of items; null until there is a rate.",
    )
    items_done: int = Field(
        default=0,
        description="Items graded so far, including those whose results are about to be stored (counts.done counts "
        "stored results only).",
    )
    conversations_done: int | None = Field(
        default=None,
        description="Judge conversations (one model reply each) done so far in the batch's engine calls; an item is "
        "one per metric, or many for a check-based metric (~14). Moves long before the first item is done; null "
        "until a worker reports one.",
    )
    conversations_planned: int | None = Field(
        default=None,
        description="Conversations planned so far. Grows while later waves are planned (a check-based metric asks "
        "about its reference's points once the reference is written; chunks not started yet count nothing): see "
        "planning_complete.",
    )
    planning_complete: bool = Field(
        default=False, description="Every item's conversations are planned: conversations_planned no longer grows."
    )
    tokens_written: int | None = Field(
        default=None,
        description="Reply tokens the judge wrote so far in the batch's conversations, finished or not: moves within "
        "one long conversation (a check-based metric's reference) while conversations_done stands still. A "
        "conversation shared by several items counts for each. Null until a worker reports one.",
    )
    tokens_read: int | None = Field(
        default=None,
        description="Prompt tokens the judge computed so far (those served from its prefix cache not counted); 0 where "
        "the engine does not say. Null until a worker reports one.",
    )
    links: BatchLinks


class ProgressEvent(BaseModel):
    """One event of GET /v1/batches/{id}/events (Server-Sent Events, `event: progress`): the batch's view, sent when
    its counts or conversations move."""

    batch: BatchView


class ResultsPage(BaseModel):
    """Results in completion order. Pass `next_cursor` back as `cursor`; it is null once the batch is over and read."""

    items: list[Judgement]
    next_cursor: str | None


class GradeRequest(BaseModel):
    """One triple to grade now (POST /v1/grade). Other top-level fields are refused (422)."""

    model_config = ConfigDict(extra="forbid")

    item: Triple
    options: BatchOptions = Field(default_factory=BatchOptions)
    field_map: str | dict[str, str] | None = Field(
        default=None, description="Your field names → juiz's: a preset (ragas, common) or {their_name: juiz_name}."
    )


class ErrorBody(BaseModel):
    """Every 4xx/5xx body: what went wrong and where."""

    status_code: int
    detail: str
    field: str | None = Field(default=None, description="The offending field, e.g. 'question' or 'options.prompt'.")
    index: int | None = Field(default=None, description="0-based index of the offending item in `items`.")
    line: int | None = Field(default=None, description="1-based line of the offending item in a JSONL upload.")
    limit: str | None = Field(default=None, description="The limit that was exceeded, e.g. 'max_items'.")
    maximum: int | None = None
    request_id: str | None = Field(default=None, description="A 500's id, also in the API's log and X-Request-ID.")


class WorkerView(BaseModel):
    name: str
    model: str | None
    state: str
    queues: list[str]
    last_heartbeat: datetime | None = None


class ReadyView(BaseModel):
    ready: bool
    redis: bool
    workers: list[WorkerView]
    reason: str | None = None
    writable: bool | None = None  # Redis accepts writes (not full, not a replica, can persist); None: not reached


class HealthView(BaseModel):
    status: str
    version: str


class BatchRename(BaseModel):
    """PATCH /v1/batches/{id}: a new name for the batch ("" removes it). Other fields are refused (422)."""

    model_config = ConfigDict(extra="forbid")

    name: BatchName = Field(description='e.g. "lectures, prompt juiz-2"; "" removes the name')
