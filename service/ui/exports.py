"""A batch's results as downloads: JSONL and CSV a page at a time (never the whole batch in memory), and the seeds'
markdown report."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import Any

from litestar import Controller, Request, Response, get
from litestar.di import NamedDependency
from litestar.params import FromPath
from litestar.response import Stream

from juiz.formats.report import render_report
from juiz.store import BatchRecord, Store
from schemas import Judgement
from schemas.judgement import METRICS
from service.ownership import owned_batch
from service.ui import session
from service.ui.params import float_param

EXPORT_PAGE = 1000
CSV_FIELDS = (
    "index", "id", "status", "score", "normalized_score", "expected_score", "manual_label", "automated_label",
    "manual_label_by", "manual_label_at", "question", "answer", "criteria", "supporting_evidence", "error", "prompt",
    "model",
)  # fmt: skip


class ExportController(Controller):
    """A batch's results as files: JSONL, CSV (formula-safe) and the seeds' markdown report."""

    path = "/"
    include_in_schema = False

    @get("/batches/{batch_id:str}/results.jsonl", sync_to_thread=True)
    def export_jsonl(
        self, request: Request[Any, Any, Any], store: NamedDependency[Store], batch_id: FromPath[str]
    ) -> Stream:
        _signed_in_batch(store, request, batch_id)
        return Stream(
            _jsonl(store, batch_id),
            media_type="application/x-ndjson",
            headers={"Content-Disposition": f'attachment; filename="juiz-{batch_id}.jsonl"'},
        )

    @get("/batches/{batch_id:str}/results.csv", sync_to_thread=True)
    def export_csv(
        self, request: Request[Any, Any, Any], store: NamedDependency[Store], batch_id: FromPath[str]
    ) -> Stream:
        _signed_in_batch(store, request, batch_id)
        return Stream(
            _csv(store, batch_id),
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


def _jsonl(store: Store, batch_id: str) -> Iterator[str]:
    """Results in completion order, a page at a time (never the whole batch in memory)."""
    offset = 0
    while True:
        raw = store.read_results_raw(batch_id, offset, EXPORT_PAGE)
        if not raw:
            return
        offset += len(raw)
        yield "".join(line + "\n" for line in raw)


def _cell(value: Any) -> Any:
    """CSV-injection guard (OWASP): text a spreadsheet would run as a formula gets a leading apostrophe."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r") and float_param(value) is None:
        return "'" + value
    return value


def _csv(store: Store, batch_id: str) -> Iterator[str]:
    """One row per result (completion order) with the main metric's fields, then each metric's score."""
    metric_columns = [f"{m}_{part}" for m in METRICS for part in ("status", "score", "expected_score")]
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow([*CSV_FIELDS, *metric_columns])
    offset = 0
    while True:
        entries = store.result_entries(batch_id, offset, EXPORT_PAGE)
        for _, index, raw in entries:
            j = Judgement.model_validate_json(raw)
            extra = j.model_extra or {}
            values: dict[str, Any] = {
                **j.model_dump(include=set(CSV_FIELDS)),
                "index": index,
                "manual_label_by": extra.get("manual_label_by"),
                "manual_label_at": extra.get("manual_label_at"),
                "prompt": j.provenance.prompt,
                "model": j.provenance.model,
            }
            metric_values: list[Any] = []
            for m in METRICS:
                result = (j.metrics or {}).get(m)
                metric_values += (
                    [None, None, None] if result is None else [result.status.value, result.score, result.expected_score]
                )
            writer.writerow([_cell(values.get(name)) for name in CSV_FIELDS] + metric_values)
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
