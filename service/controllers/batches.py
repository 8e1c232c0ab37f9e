"""/v1/batches: submit, follow, read, cancel."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any

import anyio
from litestar import Controller, Request, Response, delete, get, post
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException
from litestar.openapi.spec import OpenAPIMediaType, OpenAPIType, Operation, RequestBody, Schema
from litestar.params import FromPath, HeaderParameter, QueryParameter, RawBody
from litestar.response import Stream

from juiz.agreement import compute_agreement
from juiz.errors import InputError
from juiz.report import render_report
from juiz.store import BatchRecord, Store
from schemas import AgreementReport, BatchView, ResultsPage
from service.intake import NDJSON, read_submission
from service.views import batch_view

MAX_PAGE = 1000
STREAM_PAGE = 500
FOLLOW_POLL_S = 0.5


@dataclass
class SubmissionOperation(Operation):
    """Documents the raw body POST /v1/batches reads itself (so that its 413/422 answers name limit, item and field)."""

    def __post_init__(self) -> None:
        item = Schema(
            type=OpenAPIType.OBJECT,
            required=["question", "answer"],
            description="A Triple: id, question, answer, context (text or segments), manual_label; extra fields kept.",
        )
        self.request_body = RequestBody(
            required=True,
            description="JSON `{items, options}`, or JSONL (one triple per line) with options in the query string.",
            content={
                "application/json": OpenAPIMediaType(
                    schema=Schema(
                        type=OpenAPIType.OBJECT,
                        required=["items"],
                        properties={
                            "items": Schema(type=OpenAPIType.ARRAY, items=item),
                            "options": Schema(type=OpenAPIType.OBJECT, description="BatchOptions"),
                        },
                    )
                ),
                NDJSON: OpenAPIMediaType(schema=Schema(type=OpenAPIType.STRING, description="one triple per line")),
            },
        )


def owned_batch(store: Store, tenant: str, batch_id: str) -> BatchRecord:
    """The tenant's batch, or 404 — also for another tenant's batch, whose existence is not revealed."""
    record = store.get_batch(batch_id)
    if record is None or record.tenant != tenant:
        raise NotFoundException(detail=f"no batch {batch_id}", extra={"field": "batch_id"})
    return record


def _offset(cursor: str | None) -> int:
    if cursor is None or cursor == "":
        return 0
    if not cursor.isdigit():
        raise InputError("not a cursor from a previous page", source="query", field="cursor")
    return int(cursor)


@dataclass
class _Follow:
    """The state of one NDJSON stream."""

    store: Store
    batch_id: str
    offset: int
    follow: bool


async def _ndjson(state: _Follow) -> AsyncIterator[str]:
    """Stored results from the cursor on; with follow, keep the stream open until the batch is over and read."""
    store = state.store
    while True:
        terminal = False
        if state.follow:
            record = await anyio.to_thread.run_sync(store.get_batch, state.batch_id)
            terminal = record is None or record.terminal
        raw = await anyio.to_thread.run_sync(store.read_results_raw, state.batch_id, state.offset, STREAM_PAGE)
        if raw:
            state.offset += len(raw)
            yield "".join(line + "\n" for line in raw)
        if len(raw) == STREAM_PAGE:
            continue
        if not state.follow or terminal:
            return
        await asyncio.sleep(FOLLOW_POLL_S)


class BatchController(Controller):
    path = "/v1/batches"
    tags = ["batches"]  # noqa: RUF012 - Litestar reads it as a class attribute

    @post(
        "/",
        operation_id="createBatch",
        status_code=202,
        sync_to_thread=True,
        operation_class=SubmissionOperation,
        summary="Submit triples to grade",
    )
    def create_batch(
        self,
        request: Request[Any, Any, Any],
        state: State,
        store: NamedDependency[Store],
        tenant: NamedDependency[str],
        body: RawBody,
        idempotency_key: Annotated[str | None, HeaderParameter(name="Idempotency-Key", required=False)] = None,
        metric: Annotated[str | None, QueryParameter(description="JSONL upload: options.metric")] = None,
        prompt: Annotated[str | None, QueryParameter(description="JSONL upload: options.prompt")] = None,
        lang: Annotated[str | None, QueryParameter(description="JSONL upload: options.lang")] = None,
        mode: Annotated[str | None, QueryParameter(description="JSONL upload: options.mode")] = None,
        label_mapping: Annotated[
            str | None, QueryParameter(description="JSONL upload: options.label_mapping as JSON")
        ] = None,
    ) -> Response[BatchView]:
        """Submit a batch: a JSON `{items, options}` body, or a JSONL upload (`Content-Type: application/x-ndjson`)
        with options in the query string. 202 with the batch and its links; with an `Idempotency-Key`, the same key
        and body give back the same batch (never graded twice) and another body is a 409. Over `max_items` or
        `max_body_bytes` is a 413; an invalid item is a 422 naming its index (or line) and field, and then nothing
        is stored or queued."""
        query = {
            name: value
            for name, value in (
                ("metric", metric),
                ("prompt", prompt),
                ("lang", lang),
                ("mode", mode),
                ("label_mapping", label_mapping),
            )
            if value is not None
        }
        content_type = request.headers.get("content-type", "application/json")
        submission = read_submission(body, content_type, query, state.settings.max_items)
        record, created = store.create_batch(
            tenant,
            submission.options,
            submission.items,
            idempotency_key=idempotency_key,
            fingerprint=submission.fingerprint,
        )
        view = batch_view(record)
        response_headers = {"Location": view.links.self}
        if not created:
            response_headers["Idempotent-Replayed"] = "true"
        return Response(view, status_code=202, headers=response_headers)

    @get("/{batch_id:str}", operation_id="getBatch", sync_to_thread=True, summary="Batch status")
    def get_batch(
        self, store: NamedDependency[Store], tenant: NamedDependency[str], batch_id: FromPath[str]
    ) -> BatchView:
        """Status (queued, running, done, failed, cancelled), counts, timestamps, judgements per second, ETA."""
        return batch_view(owned_batch(store, tenant, batch_id))

    @get("/{batch_id:str}/results", operation_id="listBatchResults", summary="Results, paged or streamed")
    async def list_results(
        self,
        request: Request[Any, Any, Any],
        store: NamedDependency[Store],
        tenant: NamedDependency[str],
        batch_id: FromPath[str],
        cursor: Annotated[str | None, QueryParameter(description="next_cursor of the previous page")] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_PAGE, description="results per page")] = 100,
        follow: Annotated[bool, QueryParameter(description="NDJSON: keep streaming until the batch is over")] = False,
    ) -> Response[ResultsPage]:
        """Results in completion order, readable while the batch runs. JSON pages `{items, next_cursor}`; with
        `Accept: application/x-ndjson`, one judgement per line from the cursor on (`follow=true` waits for the rest).
        Each result has the same fields as a line of the CLI's results file."""
        await anyio.to_thread.run_sync(owned_batch, store, tenant, batch_id)
        offset = _offset(cursor)
        if NDJSON in request.headers.get("accept", ""):
            return Stream(_ndjson(_Follow(store, batch_id, offset, follow)), media_type=NDJSON)  # type: ignore[return-value]
        page = await anyio.to_thread.run_sync(partial(_page, store, batch_id, offset, limit))
        return Response(page)

    @get("/{batch_id:str}/agreement", operation_id="getBatchAgreement", sync_to_thread=True, summary="Agreement")
    def get_agreement(
        self,
        store: NamedDependency[Store],
        tenant: NamedDependency[str],
        batch_id: FromPath[str],
        resamples: Annotated[
            int, QueryParameter(ge=0, le=10_000, description="bootstrap resamples for the CIs")
        ] = 1000,
    ) -> AgreementReport:
        """Agreement between the judge and the manual labels of the items graded so far (the batch's label mapping)."""
        record = owned_batch(store, tenant, batch_id)
        judgements = store.results_in_input_order(batch_id)
        return compute_agreement(judgements, record.options.label_mapping, resamples=resamples)

    @get(
        "/{batch_id:str}/report",
        operation_id="getBatchReport",
        sync_to_thread=True,
        media_type="text/markdown; charset=utf-8",
        summary="Markdown report",
    )
    def get_report(self, store: NamedDependency[Store], tenant: NamedDependency[str], batch_id: FromPath[str]) -> str:
        """The seeds' markdown report of the items graded so far, in input order."""
        owned_batch(store, tenant, batch_id)
        return render_report(store.results_in_input_order(batch_id))

    @delete("/{batch_id:str}", operation_id="cancelBatch", status_code=200, sync_to_thread=True, summary="Cancel")
    def cancel_batch(
        self, store: NamedDependency[Store], tenant: NamedDependency[str], batch_id: FromPath[str]
    ) -> BatchView:
        """Cancel: queued chunks are dropped and no further result is stored; results already stored stay readable.
        A finished batch is left as it is."""
        record = owned_batch(store, tenant, batch_id)
        return batch_view(store.cancel_batch(record))


def _page(store: Store, batch_id: str, offset: int, limit: int) -> ResultsPage:
    record = store.get_batch(batch_id)
    items = store.read_results(batch_id, offset, limit)
    end = offset + len(items)
    more_now = end < store.result_count(batch_id)
    more_later = record is not None and not record.terminal
    return ResultsPage(items=items, next_cursor=str(end) if (more_now or more_later) else None)
