"""A batch's results as downloads: JSONL and CSV a page at a time (never the whole batch in memory), and the seeds'
markdown report. With the items table's filter in the query string (the page's export links carry it), only the
rows the table shows; the CSV holds every field: the context and the items' own extra fields too."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

from litestar import Controller, Request, Response, get
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.params import FromPath
from litestar.response import Stream

from juiz.formats.report import render_report
from juiz.store import BatchRecord, Store
from schemas import Judgement
from schemas.judgement import METRICS
from service.ownership import owned_batch
from service.rows import field_names, page_of, row_cache
from service.ui import session
from service.ui.params import float_param, table_query

EXPORT_PAGE = 1000
CSV_FIELDS = (
    "index", "id", "status", "score", "normalized_score", "expected_score", "manual_label", "automated_label",
    "manual_label_by", "manual_label_at", "question", "answer", "criteria", "supporting_evidence", "error", "prompt",
    "model", "context",
)  # fmt: skip
FILTERS = ("status", "score", "label", "disagreement", "min_uncertainty", "uncertain", "field", "value", "q")


class ExportController(Controller):
    """A batch's results as files: JSONL, CSV (formula-safe) and the seeds' markdown report."""

    path = "/"
    include_in_schema = False

    @get("/batches/{batch_id:str}/results.jsonl", sync_to_thread=True)
    def export_jsonl(
        self, request: Request[Any, Any, Any], state: State, store: NamedDependency[Store], batch_id: FromPath[str]
    ) -> Stream:
        record = _signed_in_batch(store, request, batch_id)
        return Stream(
            _jsonl(store, batch_id, _filtered(request, state, store, record)),
            media_type="application/x-ndjson",
            headers={"Content-Disposition": f'attachment; filename="juiz-{batch_id}.jsonl"'},
        )

    @get("/batches/{batch_id:str}/results.csv", sync_to_thread=True)
    def export_csv(
        self, request: Request[Any, Any, Any], state: State, store: NamedDependency[Store], batch_id: FromPath[str]
    ) -> Stream:
        record = _signed_in_batch(store, request, batch_id)
        fields = field_names(row_cache(state, store).index(record).rows)
        return Stream(
            _csv(store, batch_id, _filtered(request, state, store, record), fields),
            media_type="text/csv",  # Litestar adds the charset of a text/* type itself
            headers={"Content-Disposition": f'attachment; filename="juiz-{batch_id}.csv"'},
        )

    @get("/batches/{batch_id:str}/report.md", sync_to_thread=True)
    def export_report(
        self, request: Request[Any, Any, Any], store: NamedDependency[Store], batch_id: FromPath[str]
    ) -> Response[str]:
        record = _signed_in_batch(store, request, batch_id)
        return Response(
            render_report(store.results_in_input_order(batch_id), record.options.lang),
            media_type="text/markdown",  # Litestar adds the charset of a text/* type itself
            headers={"Content-Disposition": f'attachment; filename="juiz-{batch_id}-report.md"'},
        )


def _filtered(request: Request[Any, Any, Any], state: State, store: Store, record: BatchRecord) -> set[int] | None:
    """The positions of the rows the table's filter shows; None without a filter (every result)."""
    params = request.query_params
    if not any(params.get(name) for name in FILTERS):
        return None
    index = row_cache(state, store).index(record)
    return {view.row.position for view in page_of(index, table_query(params), 1, max(index.covered, 1)).rows}


def _jsonl(store: Store, batch_id: str, positions: set[int] | None = None) -> Iterator[str]:
    """Results in completion order, a page at a time (never the whole batch in memory)."""
    offset = 0
    while True:
        if positions is None:
            raw = store.read_results_raw(batch_id, offset, EXPORT_PAGE)
            if not raw:
                return
            offset += len(raw)
            yield "".join(line + "\n" for line in raw)
            continue
        entries = store.result_entries(batch_id, offset, EXPORT_PAGE)
        if not entries:
            return
        offset += len(entries)
        yield "".join(raw + "\n" for position, _, raw in entries if position in positions)


def _cell(value: Any) -> Any:
    """CSV-injection guard (OWASP): text a spreadsheet would run as a formula gets a leading apostrophe."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r") and float_param(value) is None:
        return "'" + value
    return value


def _scalar(value: Any) -> Any:
    """An extra field's value as a CSV cell: as it is when scalar, else its JSON."""
    return value if value is None or isinstance(value, str | int | float) else json.dumps(value, ensure_ascii=False)


def _context_text(j: Judgement) -> str | None:
    if j.context is None or isinstance(j.context, str):
        return j.context
    return "\n\n".join(segment.text for segment in j.context)


def _csv(
    store: Store, batch_id: str, positions: set[int] | None = None, fields: list[str] | None = None
) -> Iterator[str]:
    """One row per result (completion order) with the main metric's fields and the context, each metric's score,
    then the items' own extra fields."""
    metric_columns = [f"{m}_{part}" for m in METRICS for part in ("status", "score", "expected_score")]
    extra_columns = list(fields or [])
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow([*CSV_FIELDS, *metric_columns, *extra_columns])
    offset = 0
    while True:
        entries = store.result_entries(batch_id, offset, EXPORT_PAGE)
        for position, index, raw in entries:
            if positions is not None and position not in positions:
                continue
            j = Judgement.model_validate_json(raw)
            extra = j.model_extra or {}
            values: dict[str, Any] = {
                **j.model_dump(include=set(CSV_FIELDS)),
                "index": index,
                "manual_label_by": extra.get("manual_label_by"),
                "manual_label_at": extra.get("manual_label_at"),
                "prompt": j.provenance.prompt,
                "model": j.provenance.model,
                "context": _context_text(j),
            }
            metric_values: list[Any] = []
            for m in METRICS:
                result = (j.metrics or {}).get(m)
                metric_values += (
                    [None, None, None] if result is None else [result.status.value, result.score, result.expected_score]
                )
            own = [extra.get(name) for name in extra_columns]
            own = [
                v if v is None or isinstance(v, str | int | float) else json.dumps(v, ensure_ascii=False) for v in own
            ]
            writer.writerow([_cell(values.get(name)) for name in CSV_FIELDS] + metric_values + [_cell(v) for v in own])
        if buffer.tell():
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
        if len(entries) < EXPORT_PAGE:
            return
        offset += len(entries)


def _signed_in_batch(store: Store, request: Request[Any, Any, Any], batch_id: str) -> BatchRecord:
    """The signed-in tenant's batch, or the sign-in redirect / 404 the page answers otherwise."""
    return owned_batch(store, session.require(request).tenant, batch_id)
