"""/v1/batches: submit, follow, read, cancel."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any, Literal

import anyio
from litestar import Controller, Request, Response, delete, get, patch, post
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.enums import ParamType
from litestar.exceptions import HTTPException, NotFoundException
from litestar.openapi.spec import OpenAPIType, Operation, RequestBody, Schema
from litestar.openapi.spec import Parameter as OpenAPIParameter
from litestar.params import HeaderParameter, JSONBody, Parameter, QueryParameter
from litestar.response import ServerSentEvent, Stream
from litestar.response.sse import ServerSentEventMessage

from juiz.calibration.fitting import CalibrationUnavailable
from juiz.formats.options import OPTIONS
from juiz.formats.report import render_report
from juiz.runtime.errors import InputError
from juiz.store import TERMINAL, Store
from juiz.store.reads import AsyncReads
from schemas import (
    MAX_NAME_CHARS,
    AgreementByMetric,
    AgreementReport,
    BatchRename,
    BatchView,
    CalibrationSpec,
    ProgressEvent,
    ResultsPage,
)
from service import progress
from service.agreement import cached_agreement, cached_agreement_by_metric, fitted_calibration
from service.intake import (
    JSON,
    NDJSON,
    READS_JSONL,
    BatchSubmissionBody,
    accept_submission,
    document_jsonl_upload,
    is_jsonl,
    read_jsonl_submission,
)
from service.openapi import BATCH_ID_PATTERN, CURSOR_PATTERN, SECURITY, responses
from service.ownership import owned_batch
from service.views import batch_view

MAX_PAGE = 1000
UNCERTAIN_RANKS_PER_CALL = 100  # results one order=uncertain script call reads (Redis waits meanwhile)
STREAM_PAGE = 500
FOLLOW_WAIT_S = 5.0  # one blocking read at most this long (then the batch is read again anyway)

Resamples = Annotated[
    int, QueryParameter(ge=0, le=10_000, description="bootstrap resamples for the CIs (capped by agreement_max_work)")
]
BatchId = Annotated[
    str, Parameter(pattern=BATCH_ID_PATTERN, description="The batch id juiz gave (32 hexadecimal digits).")
]


async def _uncertain_page(reads: AsyncReads, tenant: str, batch_id: str, offset: int, limit: int) -> Response[Any]:
    """A page of the results stored so far, most uncertain first (juiz.judging.uncertainty.uncertain_first), read from
    the batch's index, never the whole batch; while the batch runs, new results can reorder the pages (next_cursor is
    null once the batch is over and read). Script calls on the event loop (juiz.store.reads), the stored JSON as it
    is: no thread hop, no Judgement parsed and serialised again (20 concurrent readers of such pages held the event
    loop: another tenant's poll p99 1.6 s). At most UNCERTAIN_RANKS_PER_CALL results per call, one call after
    another: a script blocks Redis while it runs (one LINDEX per result, ~10 µs each on a 10k batch), so a page of
    1,000 in one call made every other client's command wait ~10 ms behind each reader's page."""
    entries: list[bytes] = []
    first, stop = offset, offset + limit
    while True:
        asked = min(stop - first, UNCERTAIN_RANKS_PER_CALL)
        page = await reads.uncertain(batch_id, first, first + asked - 1)
        if page.owner != tenant:
            raise NotFoundException(detail=f"no batch {batch_id}", extra={"field": "batch_id"})
        entries += page.entries
        first += page.ranked
        if first >= stop or page.ranked < asked:
            break  # the page is full, or the index holds no more
    next_cursor = str(first) if (first < page.count or not page.terminal) else None
    body = b'{"items":[' + b",".join(_judgement_json(e) for e in entries) + b'],"next_cursor":'
    body += json.dumps(next_cursor).encode() + b"}"
    return Response(body, media_type=JSON)


@dataclass
class SubmissionOperation(Operation):
    """Adds the JSONL upload beside the JSON body Litestar documented from BatchSubmission."""

    def __post_init__(self) -> None:
        if isinstance(self.request_body, RequestBody):
            self.request_body.description = (
                "JSON `{items, options, name}`, or JSONL (one triple per line) with options and name in the query."
            )
            document_jsonl_upload(self.request_body, "Triple")
        self.parameters = [*(self.parameters or []), *_query_parameters()]


def _query_parameters() -> list[OpenAPIParameter]:
    """The JSONL upload's query parameters, one per option of schemas.BatchOptions (juiz.formats.options) and
    field_map."""
    parameters = []
    for spec in OPTIONS.values():
        if spec.kind == "list":
            note = "comma-separated"
        elif spec.kind == "json":
            note = "as JSON"
        else:
            note = f"one of {', '.join(spec.choices)}" if spec.choices else ""
        described = f"JSONL upload: options.{spec.name}{f' ({note})' if note else ''}. {spec.help}".strip()
        parameters.append(
            OpenAPIParameter(
                name=spec.name,
                param_in=ParamType.QUERY,
                required=False,
                schema=Schema(type=OpenAPIType.STRING),
                description=described,
            )
        )
    parameters.append(
        OpenAPIParameter(
            name="field_map",
            param_in=ParamType.QUERY,
            required=False,
            schema=Schema(type=OpenAPIType.STRING),
            description="JSONL upload: your field names → juiz's, a preset (ragas, common) or a JSON object",
        )
    )
    parameters.append(
        OpenAPIParameter(
            name="name",
            param_in=ParamType.QUERY,
            required=False,
            schema=Schema(type=OpenAPIType.STRING, max_length=MAX_NAME_CHARS),
            description="JSONL upload: the batch's name (at most 200 characters, no control characters)",
        )
    )
    return parameters


def store_of(state: State) -> Store:
    return state.store  # type: ignore[no-any-return]


def _offset(cursor: str | None) -> int:
    # isdigit() alone accepts '²'; more than 15 digits is no offset Redis can hold (and no cursor juiz gave).
    if cursor is None or cursor == "":
        return 0
    if not (cursor.isascii() and cursor.isdigit() and len(cursor) <= 15):
        raise InputError("not a cursor from a previous page", source="query", field="cursor")
    return int(cursor)


async def _owned_raw_results(
    reads: AsyncReads, tenant: str, batch_id: str, offset: int, limit: int
) -> tuple[list[bytes], bool, int]:
    """One round trip on the event loop: (raw result entries from `offset`, batch over, results stored). 404 for
    another tenant's batch. The hot path of result pages and polls: no thread hop, no Judgement re-validation."""
    page = await reads.results(batch_id, offset, limit)
    if page.owner != tenant:
        raise NotFoundException(detail=f"no batch {batch_id}", extra={"field": "batch_id"})
    return page.entries, page.terminal, page.count


def _judgement_json(entry: bytes) -> bytes:
    """A stored entry is b"index\njudgement JSON"; the JSON was validated when the worker stored it."""
    return entry.partition(b"\n")[2]


@dataclass
class _Follow:
    """The state of one NDJSON stream."""

    reads: AsyncReads
    tenant: str
    batch_id: str
    offset: int
    follow: bool
    cursor: str = progress.START  # the batch's progress events read so far


async def _ndjson(state: _Follow, first: list[bytes], terminal: bool) -> AsyncIterator[bytes]:
    """Stored results from the cursor on; with follow, keep the stream open until the batch is over and read.
    The first page was read before the 200 was sent, so a bad cursor or a missing batch is a 4xx, never a cut body."""
    entries = first
    while True:
        if entries:
            state.offset += len(entries)
            yield b"".join(_judgement_json(entry) + b"\n" for entry in entries)
        if len(entries) < STREAM_PAGE:
            if not state.follow or terminal:
                return
            # Wakes on the batch's next progress event (results stored, a cancel), not on a timer.
            state.cursor = await state.reads.wait_for_progress(state.batch_id, state.cursor, FOLLOW_WAIT_S)
        entries, terminal, _ = await _owned_raw_results(
            state.reads, state.tenant, state.batch_id, state.offset, STREAM_PAGE
        )


EVENTS_KEEPALIVE_S = 15.0  # a comment line when nothing moved for this long: proxies keep the stream open


async def _owned_view(reads: AsyncReads, tenant: str, batch_id: str) -> BatchView:
    record = await reads.batch(batch_id)
    if record is None or record.tenant != tenant:
        raise NotFoundException(detail=f"no batch {batch_id}", extra={"field": "batch_id"})
    return batch_view(record)


def _moved(view: BatchView) -> tuple[object, ...]:
    """What an event is sent for: the status, the counts, the conversations and their tokens (not the ETA, which moves
    with the clock)."""
    return (
        view.status,
        view.counts,
        view.items_done,
        view.conversations_done,
        view.conversations_planned,
        view.tokens_written,
        view.tokens_read,
    )


async def _progress_events(
    reads: AsyncReads, tenant: str, batch_id: str, first: BatchView
) -> AsyncIterator[ServerSentEventMessage]:
    """The batch's view now, then again whenever it moved (woken by its events stream: results stored, progress
    written, a cancel); over after the view of a batch that is over."""
    view, cursor, quiet_s = first, progress.START, 0.0
    shown: tuple[object, ...] | None = None
    while True:
        if _moved(view) != shown:
            shown, quiet_s = _moved(view), 0.0
            yield ServerSentEventMessage(data=ProgressEvent(batch=view).model_dump_json(), event="progress")
        elif quiet_s >= EVENTS_KEEPALIVE_S:
            quiet_s = 0.0
            yield ServerSentEventMessage(comment="keep-alive")
        if view.status in TERMINAL:
            return
        seen = cursor
        cursor = await reads.wait_for_progress(batch_id, cursor, FOLLOW_WAIT_S)
        quiet_s += FOLLOW_WAIT_S if cursor == seen else 0.0
        try:
            view = await _owned_view(reads, tenant, batch_id)
        except NotFoundException:
            return  # purged while followed


class BatchController(Controller):
    path = "/v1/batches"
    tags = ["batches"]  # noqa: RUF012 - Litestar reads it as a class attribute
    security = SECURITY

    @post(
        "/",
        operation_id="createBatch",
        status_code=202,
        operation_class=SubmissionOperation,
        opt={READS_JSONL: True},
        responses=responses(401, 409, 413, 415, 422, 429, 503),
        summary="Submit triples to grade",
    )
    async def create_batch(
        self,
        request: Request[Any, Any, Any],
        state: State,
        store: NamedDependency[Store],
        tenant: NamedDependency[str],
        data: JSONBody[BatchSubmissionBody | None] = None,
        idempotency_key: Annotated[str | None, HeaderParameter(name="Idempotency-Key", required=False)] = None,
    ) -> Response[BatchView]:
        """Submit a batch: a JSON `{items, options}` body, or a JSONL upload (`Content-Type: application/x-ndjson`)
        with options in the query string. 202 with the batch and its links; with an `Idempotency-Key`, the same key
        and body give back the same batch (never graded twice) and another body is a 409. Over `max_items` or
        `max_body_bytes` is a 413; an invalid item is a 422 naming its index (or line) and field, and then nothing
        is stored or queued."""
        # The query is read here, not declared one by one: the options' query parameters are derived from
        # BatchOptions (and documented by SubmissionOperation), and an unknown one is a 422 naming it.
        query = {name: request.query_params.getall(name) for name in request.query_params}
        content_type = request.headers.get("content-type") or JSON
        body = await request.body()  # read once already (cached): the idempotency fingerprint is of the bytes sent
        if is_jsonl(content_type):
            # JSONL is no JSON document for Litestar to validate: it is read line by line, errors naming the line.
            read = partial(read_jsonl_submission, body, content_type, query, state.settings)
        elif data is None:
            raise InputError("expected a JSON object in the request body", source="body")
        else:
            read = partial(accept_submission, data, body, content_type, query, state.settings)
        submission = await anyio.to_thread.run_sync(read)
        record, created = await anyio.to_thread.run_sync(
            partial(
                store.create_batch,
                tenant,
                submission.options,
                submission.items,
                idempotency_key=idempotency_key,
                fingerprint=submission.fingerprint,
                name=submission.name,
            )
        )
        view = batch_view(record)
        response_headers = {"Location": view.links.self}
        if not created:
            response_headers["Idempotent-Replayed"] = "true"
        return Response(view, status_code=202, headers=response_headers)

    @get(
        "/{batch_id:str}",
        operation_id="getBatch",
        responses=responses(401, 404, 422, 429, 503),
        summary="Batch status",
    )
    async def get_batch(self, state: State, tenant: NamedDependency[str], batch_id: BatchId) -> BatchView:
        """Status (queued, running, done, failed, cancelled), counts, timestamps, judgements per second, ETA."""
        # The polling path: one HGETALL on the event loop, no worker-thread hop (under load, handing the GIL
        # between the loop and a thread is what stretched the p99).
        record = await store_of(state).reads.batch(batch_id)
        if record is None or record.tenant != tenant:
            raise NotFoundException(detail=f"no batch {batch_id}", extra={"field": "batch_id"})
        return batch_view(record)

    @get(
        "/{batch_id:str}/events",
        operation_id="streamBatchEvents",
        media_type="text/event-stream",
        responses=responses(401, 404, 422, 429, 503),
        summary="Progress events (Server-Sent Events)",
    )
    async def stream_events(self, state: State, tenant: NamedDependency[str], batch_id: BatchId) -> ServerSentEvent:
        """Server-Sent Events, `event: progress`, each one's data a ProgressEvent (`{"batch": <the batch's view>}`):
        sent at once, then whenever the batch's status, counts, conversations or tokens move: conversations done /
        planned move within an item and tokens_written / tokens_read within a conversation (the workers write them
        about once a second while they grade), items_done and counts as results are stored. The stream ends after the
        event of a batch that is over (done, failed, cancelled)."""
        reads = store_of(state).reads
        first = await _owned_view(reads, tenant, batch_id)  # a missing batch is a 404, not a cut stream
        return ServerSentEvent(_progress_events(reads, tenant, batch_id, first))

    @get(
        "/{batch_id:str}/results",
        operation_id="listBatchResults",
        responses=responses(401, 404, 422, 429, 503),
        summary="Results, paged or streamed",
    )
    async def list_results(
        self,
        request: Request[Any, Any, Any],
        state: State,
        tenant: NamedDependency[str],
        batch_id: BatchId,
        cursor: Annotated[
            str | None, QueryParameter(pattern=CURSOR_PATTERN, description="next_cursor of the previous page")
        ] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_PAGE, description="results per page")] = 100,
        follow: Annotated[bool, QueryParameter(description="NDJSON: keep streaming until the batch is over")] = False,
        order: Annotated[
            Literal["completion", "uncertain"],
            QueryParameter(
                description="completion (default): as graded; uncertain: the results stored so far, most uncertain "
                "first (where a human label helps most; JSON pages only)"
            ),
        ] = "completion",
    ) -> Response[ResultsPage]:
        """Results in completion order, readable while the batch runs. JSON pages `{items, next_cursor}`; with
        `Accept: application/x-ndjson`, one judgement per line from the cursor on (`follow=true` waits for the rest).
        Each result has the same fields as a line of the CLI's results file."""
        offset = _offset(cursor)
        reads = store_of(state).reads
        if order == "uncertain":
            if follow:
                raise InputError("follow streams in completion order; use order=completion", field="order")
            return await _uncertain_page(reads, tenant, batch_id, offset, limit)
        if NDJSON in request.headers.get("accept", ""):
            first, terminal, _ = await _owned_raw_results(reads, tenant, batch_id, offset, STREAM_PAGE)
            stream = _ndjson(_Follow(reads, tenant, batch_id, offset, follow), first, terminal)
            return Stream(stream, media_type=NDJSON)  # type: ignore[return-value]
        entries, terminal, count = await _owned_raw_results(reads, tenant, batch_id, offset, limit)
        end = offset + len(entries)
        next_cursor = str(end) if (end < count or not terminal) else None
        # The page is assembled from the stored JSON as it is: re-validating every Judgement and serialising it
        # again was most of a page's cost under load (the mixed-load benchmark's p99).
        body = b'{"items":[' + b",".join(_judgement_json(e) for e in entries) + b'],"next_cursor":'
        body += json.dumps(next_cursor).encode() + b"}"
        return Response(body, media_type=JSON)  # type: ignore[return-value,arg-type]

    @get(
        "/{batch_id:str}/agreement",
        operation_id="getBatchAgreement",
        responses=responses(401, 404, 422, 429, 503),
        summary="Agreement",
    )
    async def get_agreement(
        self,
        state: State,
        store: NamedDependency[Store],
        tenant: NamedDependency[str],
        batch_id: BatchId,
        resamples: Resamples = 1000,
    ) -> AgreementReport:
        """Agreement between the judge and the manual labels of the items graded so far (the batch's label mapping).
        Resamples × items is capped by `agreement_max_work` (resamples are lowered to fit; the report says how many
        were used). A finished batch's report is computed once and cached; the bootstrap runs off the event loop."""
        record = await anyio.to_thread.run_sync(owned_batch, store, tenant, batch_id)
        return await cached_agreement(store, record, resamples)

    @get(
        "/{batch_id:str}/agreement/metrics",
        operation_id="getBatchAgreementByMetric",
        responses=responses(401, 404, 422, 429, 503),
        summary="Agreement of each metric and the verdict",
    )
    async def get_agreement_by_metric(
        self,
        state: State,
        store: NamedDependency[Store],
        tenant: NamedDependency[str],
        batch_id: BatchId,
        resamples: Resamples = 1000,
    ) -> AgreementByMetric:
        """Side by side against the same manual labels: each graded metric (its score, and its expected score cut by
        the label mapping's thresholds) and the verdict (the mapping's rule, or juiz's default), as `juiz agreement
        --by-metric` prints: which judge signal matches your annotators. One bootstrap per column, all of them
        within `agreement_max_work`; a finished batch's report is cached."""
        record = await anyio.to_thread.run_sync(owned_batch, store, tenant, batch_id)
        return await cached_agreement_by_metric(store, record, resamples)

    @get(
        "/{batch_id:str}/calibration",
        operation_id="fitBatchCalibration",
        responses=responses(401, 404, 409, 422, 429, 503),
        summary="Fit a calibration on the batch's labels",
    )
    async def get_calibration(
        self,
        store: NamedDependency[Store],
        tenant: NamedDependency[str],
        batch_id: BatchId,
        folds: Annotated[int, QueryParameter(ge=2, le=20, description="cross-fitting folds")] = 5,
        seed: Annotated[int, QueryParameter(ge=0, le=2**31 - 1, description="seed of the folds")] = 0,
    ) -> CalibrationSpec:
        """A calibration fitted on every labelled result of the batch (the file `juiz calibrate` writes; its
        held-out, cross-fitted figures are inside). Pass it as `options.calibration` to grade unlabelled batches
        with it. 409 when the labels can't support a fit (too few, a single class), with the reason."""
        record = await anyio.to_thread.run_sync(owned_batch, store, tenant, batch_id)
        try:
            return await fitted_calibration(store, record, folds, seed)
        except CalibrationUnavailable as exc:
            raise HTTPException(
                status_code=409, detail=f"cannot calibrate: {exc}", extra={"field": "manual_label"}
            ) from None

    @get(
        "/{batch_id:str}/report",
        operation_id="getBatchReport",
        sync_to_thread=True,
        media_type="text/markdown",  # Litestar adds the charset of a text/* type itself
        responses=responses(401, 404, 422, 429, 503),
        summary="Markdown report",
    )
    def get_report(self, store: NamedDependency[Store], tenant: NamedDependency[str], batch_id: BatchId) -> str:
        """The seeds' markdown report of the items graded so far, in input order: in the batch's language
        (options.lang), or with auto in the language most items were graded in (Portuguese, the seeds' own, or
        English)."""
        record = owned_batch(store, tenant, batch_id)
        return render_report(store.results_in_input_order(batch_id), record.options.lang)

    @delete(
        "/{batch_id:str}",
        operation_id="cancelBatch",
        status_code=200,
        sync_to_thread=True,
        responses=responses(401, 404, 422, 429, 503),
        summary="Cancel",
    )
    def cancel_batch(
        self,
        store: NamedDependency[Store],
        tenant: NamedDependency[str],
        batch_id: BatchId,
        purge: Annotated[
            bool, QueryParameter(description="erase the batch: its items, results, reports and cache entries")
        ] = False,
    ) -> BatchView:
        """Cancel: queued chunks are dropped and no further result is stored; results already stored stay readable.
        A finished batch is left as it is. With `purge=true` the batch is erased (cancelled first if it runs): the
        view returned is its last, and the batch's URLs answer 404 from then on."""
        record = owned_batch(store, tenant, batch_id)
        if purge:
            last = store.cancel_batch(record) if not record.terminal else record
            store.purge_batch(last)
            return batch_view(last)
        return batch_view(store.cancel_batch(record))

    @patch(
        "/{batch_id:str}",
        operation_id="renameBatch",
        sync_to_thread=True,
        responses=responses(401, 404, 415, 422, 429, 503),
        summary="Rename",
    )
    def rename_batch(
        self,
        store: NamedDependency[Store],
        tenant: NamedDependency[str],
        batch_id: BatchId,
        data: JSONBody[BatchRename],
    ) -> BatchView:
        """Give the batch a name (shown by the web page and in the batch's view): a JSON body `{"name": "..."}`,
        "" removes it. 422 for another body, as PATCH of an item's label answers."""
        record = owned_batch(store, tenant, batch_id)
        store.set_batch_name(record.id, data.name.strip())
        return batch_view(owned_batch(store, tenant, batch_id))
