"""/ui: the web page for the people who read the grades (issue 11). Server-rendered HTML, one small static script.

Pages: sign-in; batches (list, live progress, upload with options, cancel); one batch (histograms per metric,
confusion heat map, agreement with CIs, the items table filtered, sorted and paged on the server); one item (segments,
answer, each metric's reasoning, labels, a form to set the manual label); exports (JSONL, CSV, the seeds' report).
"""

from __future__ import annotations

import csv
import io
import json
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

import anyio
from litestar import Controller, Request, Response, get, post
from litestar.datastructures import State, UploadFile
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException
from litestar.params import FromPath, QueryParameter
from litestar.response import Redirect, Stream

from juiz.errors import InputError, PromptError
from juiz.labels import class_of_label, resolve_numeric_scale
from juiz.options import OPTIONS, options_from_text
from juiz.readers import JSONL_SUFFIXES, REPORT_SUFFIXES, read_triples
from juiz.report import render_report
from juiz.store import BatchRecord, Store
from schemas import MAX_NAME_CHARS, AgreementReport, Judgement
from schemas.judgement import METRICS
from schemas.labels import LabelMapping
from schemas.triple import Label
from service.auth import tenant_for
from service.controllers.batches import owned_batch
from service.errors import LimitExceeded
from service.intake import read_name, read_submission
from service.ui import charts, session
from service.ui.labels import saved_calibration, set_manual_label
from service.ui.render import fragment, html
from service.ui.rows import (
    INTERNAL_FIELDS,
    SORT_KEYS,
    BatchIndex,
    Query,
    RowCache,
    agreement_of,
    expected_bins,
    field_names,
    metrics_present,
    page_of,
    score_counts,
)
from service.ui.session import Posted
from service.views import batch_view

PER_PAGE = 50
BATCHES_PER_PAGE = 25
UPLOAD_SUFFIXES = (*JSONL_SUFFIXES, ".json", ".csv", *REPORT_SUFFIXES)
EXPORT_PAGE = 1000
CSV_FIELDS = (
    "index", "id", "status", "score", "normalized_score", "expected_score", "manual_label", "automated_label",
    "manual_label_by", "manual_label_at", "question", "answer", "criteria", "supporting_evidence", "error", "prompt",
    "model",
)  # fmt: skip


def row_cache(state: State, store: Store) -> RowCache:
    cache: RowCache | None = getattr(state, "ui_rows", None)
    if cache is None or cache.store is not store:
        cache = RowCache(store)
        state.ui_rows = cache
    return cache


def _stamp(value: float | None) -> str:
    return "" if value is None else datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _int(value: str | None) -> int | None:
    return int(value) if value not in (None, "") and str(value).lstrip("-").isdigit() else None


def _float(value: str | None) -> float | None:
    try:
        return None if value in (None, "") else float(str(value))
    except ValueError:
        return None


MIN_PACE_S = 1.0


def pace(record: BatchRecord, cached: int = 0) -> float | None:
    """Judgements per second, or None when it means nothing: a batch over in under a second, or one mostly served
    from the result cache (its 'pace' was Redis reads, shown as ~1,000 judgements/s)."""
    view = batch_view(record)
    if view.judgements_per_s is None or record.started_at is None:
        return None
    if cached * 2 >= max(record.counts.done, 1):
        return None
    end = (record.finished_at or record.updated_at) if record.terminal else None
    if end is not None and end - record.started_at < MIN_PACE_S:
        return None
    return view.judgements_per_s


def upload_name(filename: str) -> str:
    """A batch's default name: its file's name without the folder or the suffix (what the form's script fills in)."""
    return Path(filename.replace("\\", "/")).stem[:MAX_NAME_CHARS].strip()


def batch_base(batch_id: str) -> str:
    return f"/ui/batches/{batch_id}"


class UIController(Controller):
    path = "/"
    include_in_schema = False

    @get("/", sync_to_thread=False)
    def home(self) -> Redirect:
        return Redirect("/ui/batches")

    # --- sign-in ------------------------------------------------------------------------------------------------

    @get("/signin", sync_to_thread=False)
    def signin_form(self, request: Request[Any, Any, Any]) -> Response[Any]:
        back = request.query_params.get("next", "")
        if session.open_api(request):
            return Redirect(back if session.safe_next(back) else "/ui/batches")
        return html("signin.html", error=None, next=back if session.safe_next(back) else "")

    @post("/signin", status_code=303)
    async def signin(self, request: Request[Any, Any, Any], store: NamedDependency[Store]) -> Response[Any]:
        """Exchange the API key for a session cookie. The key is read from the form body and never kept."""
        session.check_origin(request)
        retry_after = await anyio.to_thread.run_sync(session.signin_retry_after, store, request)
        if retry_after is not None:
            response = html(
                "signin.html", error="Too many attempts: wait a minute and try again.", status_code=429, next=""
            )
            response.headers["Retry-After"] = str(retry_after)
            return response
        form = await request.form()
        key = str(form.get("api_key") or "").strip()
        back = str(form.get("next") or "")
        back = back if session.safe_next(back) else ""
        tenant = tenant_for(key, request.app.state.tenants_by_key) if key else None
        if tenant is None:
            return html("signin.html", error="That API key is not known.", status_code=401, next=back)
        new = await anyio.to_thread.run_sync(session.create, store, tenant)
        response = Redirect(back or "/ui/batches", status_code=303)
        response.set_cookie(session.cookie_for(new, request))
        return response

    @post("/signout", status_code=303)
    async def signout(self, store: NamedDependency[Store], posted: NamedDependency[Posted]) -> Response[Any]:
        await anyio.to_thread.run_sync(session.delete, store, posted.session)
        response = Redirect("/ui/signin", status_code=303)
        response.set_cookie(session.expired_cookie())
        return response

    # --- batches ------------------------------------------------------------------------------------------------

    @get("/batches", sync_to_thread=True)
    def batches(
        self,
        request: Request[Any, Any, Any],
        store: NamedDependency[Store],
        page: Annotated[int, QueryParameter(ge=1)] = 1,
    ) -> Response[Any]:
        current = session.require(store, request)
        flash = session.pop_flash(store, current)
        # A refused upload, redirected here: its error and the form as it was sent.
        if flash is not None and "error" in flash:
            response = self._batches_page(request, store, current, page, flash["error"], flash["form"], 422)
        else:
            response = self._batches_page(request, store, current, page)
        return session.with_cookie(request, response)

    def _batches_page(
        self,
        request: Request[Any, Any, Any],
        store: Store,
        current: session.Session,
        page: int = 1,
        error: str | None = None,
        form: dict[str, Any] | None = None,
        status_code: int = 200,
    ) -> Response[Any]:
        records, total = store.list_batches(current.tenant, (page - 1) * BATCHES_PER_PAGE, BATCHES_PER_PAGE)
        pages = max(1, -(-total // BATCHES_PER_PAGE))
        return html(
            "batches.html",
            status_code=status_code,
            session=current,
            signed_in=not session.open_api(request),
            batches=[(r, pace(r)) for r in records],
            stamp=_stamp,
            page=page,
            pages=pages,
            total=total,
            metrics=METRICS,
            error=error,
            form=form
            or {
                "metrics": ["answer_relevance"],
                "mode": "cot",
                "lang": "auto",
                "prompt": "",
                "label_mapping": "",
                "calibration": True,
                "name": "",
            },
            max_items=store.settings.max_items,
            max_name=MAX_NAME_CHARS,
            saved_calibration=saved_calibration(store, current.tenant),
            calibration_saved=request.query_params.get("calibration") == "saved",
        )

    @post("/batches", status_code=303)  # the app-wide max_body_bytes bounds the upload (413 beyond it)
    async def upload(
        self, request: Request[Any, Any, Any], store: NamedDependency[Store], posted: NamedDependency[Posted]
    ) -> Response[Any]:
        """A new batch from an uploaded file (JSONL, JSON, CSV or a seeds-format report) and the form's options;
        every item is validated as POST /v1/batches validates it."""
        current, form = posted.session, posted.form
        values = {
            "metrics": [str(m) for m in form.getall("metrics", [])] or ["answer_relevance"],
            "prompt": str(form.get("prompt") or "").strip(),
            "mode": str(form.get("mode") or "cot"),
            "lang": str(form.get("lang") or "auto"),
            "label_mapping": str(form.get("label_mapping") or "").strip(),
            "calibration": form.get("use_saved_calibration") == "1",  # not an option field: OPTIONS reads JSON there
        }
        values["name"] = name = str(form.get("name") or "")
        # Every option the form sends, read as the JSONL upload's query is (both derived from BatchOptions).
        options = {
            name: [str(v) for v in form.getall(name, []) if str(v).strip()] for name in OPTIONS if form.getall(name, [])
        }
        options = {name: texts for name, texts in options.items() if texts}
        calibrate = form.get("use_saved_calibration") == "1"
        upload = form.get("file")
        try:
            if not isinstance(upload, UploadFile) or not upload.filename:
                raise InputError("choose a file to upload", field="file")
            content = await upload.read()
            record = await anyio.to_thread.run_sync(
                self._create, store, current.tenant, upload.filename, content, options, calibrate, name
            )
        except (InputError, PromptError, LimitExceeded) as exc:
            # Post/redirect/get: the error page is a GET, so reloading it doesn't send the upload again.
            await anyio.to_thread.run_sync(session.put_flash, store, current, {"error": str(exc), "form": values})
            return session.with_cookie(request, Redirect("/ui/batches#new-title", status_code=303))
        return session.with_cookie(request, Redirect(batch_base(record.id), status_code=303))

    @staticmethod
    def _create(
        store: Store,
        tenant: str,
        filename: str,
        content: bytes,
        form: dict[str, list[str]],
        calibrate: bool = False,
        name: str = "",
    ) -> BatchRecord:
        """The batch, named as the form says; a blank name (no script filled it in) is the file's name."""
        suffix = Path(filename).suffix.lower()
        if suffix not in UPLOAD_SUFFIXES:
            raise InputError(f"unknown file type '{suffix or '(none)'}'; expected one of {', '.join(UPLOAD_SUFFIXES)}")
        with tempfile.TemporaryDirectory(prefix="juiz-upload-") as folder:
            path = Path(folder) / f"upload{suffix}"
            path.write_bytes(content)
            try:
                triples = read_triples(path)
            except InputError as exc:
                raise InputError(exc.message, source=Path(filename).name, line=exc.line, field=exc.field) from None
        options = options_from_text(form, source="form")
        if calibrate:
            spec = saved_calibration(store, tenant)
            if spec is None:
                raise InputError("no saved calibration: fit one from a label queue's end", field="options.calibration")
            options["calibration"] = spec.model_dump(mode="json")
        # The API's own intake: the same limits, lengths, depth and option checks as POST /v1/batches.
        items = [t.model_dump(mode="json") for t in triples]
        name = name.strip() or upload_name(filename)
        body = json.dumps({"items": items, "options": options, "name": name}).encode()
        submission = read_submission(body, "application/json", {}, store.settings)
        record, _ = store.create_batch(tenant, submission.options, submission.items, name=submission.name)
        return record

    @get("/batches/{batch_id:str}/progress", sync_to_thread=True)
    def progress(
        self, request: Request[Any, Any, Any], store: NamedDependency[Store], batch_id: FromPath[str]
    ) -> dict[str, Any]:
        """What the page's script polls while a batch runs."""
        current = session.require(store, request)
        view = batch_view(owned_batch(store, current.tenant, batch_id))
        return {
            "status": view.status.value,
            "terminal": view.status.value in {"done", "failed", "cancelled"},
            **view.counts.model_dump(),
            "judgements_per_s": view.judgements_per_s,
            "eta_s": view.eta_s,
        }

    @post("/batches/{batch_id:str}/name", status_code=303)
    async def rename(
        self,
        store: NamedDependency[Store],
        batch_id: FromPath[str],
        posted: NamedDependency[Posted],
    ) -> Response[Any]:
        current, form = posted.session, posted.form
        record = await anyio.to_thread.run_sync(owned_batch, store, current.tenant, batch_id)
        name = read_name(str(form.get("name") or ""), source="form") or ""  # the API's rules: a 422 page naming name
        await anyio.to_thread.run_sync(store.set_batch_name, record.id, name)
        return Redirect(batch_base(batch_id), status_code=303)

    @post("/batches/{batch_id:str}/cancel", status_code=303)
    async def cancel(
        self,
        store: NamedDependency[Store],
        batch_id: FromPath[str],
        posted: NamedDependency[Posted],
    ) -> Response[Any]:
        current, form = posted.session, posted.form
        record = await anyio.to_thread.run_sync(owned_batch, store, current.tenant, batch_id)
        await anyio.to_thread.run_sync(store.cancel_batch, record)
        back = str(form.get("next") or "")
        target = back if session.safe_next(back) else batch_base(batch_id)
        return Redirect(target, status_code=303)

    # --- one batch ----------------------------------------------------------------------------------------------

    @get("/batches/{batch_id:str}", sync_to_thread=True)
    def batch(
        self,
        request: Request[Any, Any, Any],
        state: State,
        store: NamedDependency[Store],
        batch_id: FromPath[str],
    ) -> Response[Any]:
        current = session.require(store, request)
        context = _batch_context(request, state, store, current, batch_id)
        return session.with_cookie(request, html("batch.html", **context))

    @get("/batches/{batch_id:str}/live", sync_to_thread=True)
    def live(
        self,
        request: Request[Any, Any, Any],
        state: State,
        store: NamedDependency[Store],
        batch_id: FromPath[str],
    ) -> dict[str, Any]:
        """The parts of the batch page that move while it runs (scores, agreement, the items table under the page's
        own filters), rendered as the page renders them: its script swaps them in place, with no reload."""
        current = session.require(store, request)
        context = _batch_context(request, state, store, current, batch_id)
        record = context["record"]
        return {
            "terminal": record.terminal,
            "graded": context["graded"],
            "agreement_pending": not context["agreement_complete"],
            "html": {
                "scores-body": fragment("_scores.html", **context),
                "agreement-body": fragment("_agreement.html", **context),
                "items-body": fragment("_items.html", **context),
            },
        }

    @get("/batches/{batch_id:str}/agreement", sync_to_thread=True)
    def agreement(
        self,
        request: Request[Any, Any, Any],
        state: State,
        store: NamedDependency[Store],
        batch_id: FromPath[str],
    ) -> Response[Any]:
        """The agreement section alone: 202 while its bootstrap intervals are being computed, 200 once they are in
        (the page's script swaps it in then)."""
        current = session.require(store, request)
        record = owned_batch(store, current.tenant, batch_id)
        index = row_cache(state, store).index(record)
        report, complete, error = _agreement(index, store, record)
        return html(
            "_agreement.html",
            status_code=200 if complete else 202,
            record=record,
            agreement=report,
            agreement_complete=complete,
            agreement_error=error,
            heat_map=None if report is None else charts.heat_map(report.confusion_matrix, report.classes),
        )

    # --- one item -----------------------------------------------------------------------------------------------

    @get("/batches/{batch_id:str}/items/{item_index:int}", sync_to_thread=True)
    def item(
        self,
        request: Request[Any, Any, Any],
        state: State,
        store: NamedDependency[Store],
        batch_id: FromPath[str],
        item_index: FromPath[int],
    ) -> Response[Any]:
        current = session.require(store, request)
        record = owned_batch(store, current.tenant, batch_id)
        index = row_cache(state, store).index(record)
        flash = session.pop_flash(store, current) or {}
        row = index.by_index.get(item_index)
        judgement: Judgement | None = None
        if row is not None:
            judgement = store.results_at(batch_id, [row.position])[0]
        triple = None if judgement is not None else store.item_at(batch_id, item_index)
        if judgement is None and triple is None:
            raise NotFoundException(detail=f"no item {item_index} in batch {batch_id}")
        source = judgement if judgement is not None else triple
        assert source is not None
        context = source.context
        if isinstance(context, str):
            segments = [{"text": context, "source": None, "start": None, "end": None, "score": None}] if context else []
        else:
            segments = [s.model_dump() for s in context or []]
        metric_results = (judgement.metrics or {}) if judgement is not None else {}
        segment_grades = {}
        relevance = metric_results.get("context_relevance")
        if relevance is not None and relevance.segments:
            segment_grades = {g.index: g for g in relevance.segments}
        extra = (judgement.model_extra if judgement is not None else triple.model_extra if triple else None) or {}
        mapping = record.options.label_mapping
        # The item's own extra fields (what the uploader sent beside question/answer/context), shown as sent.
        metadata = [
            (name, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
            for name, value in extra.items()
            if name not in INTERNAL_FIELDS  # juiz's own, shown in the labels section
        ]
        return session.with_cookie(
            request,
            html(
                "item.html",
                session=current,
                signed_in=not session.open_api(request),
                record=record,
                item_index=item_index,
                judgement=judgement,
                item=source,
                segments=segments,
                segment_grades=segment_grades,
                metric_results=metric_results,
                classes=[c.name for c in mapping.classes],
                manual_class=manual_class_name(source.manual_label, mapping),
                label_by=extra.get("manual_label_by"),
                label_at=extra.get("manual_label_at"),
                back=request.query_params.get("back", ""),
                message=request.query_params.get("saved"),
                conflict=flash.get("conflict"),
                metadata=metadata,
            ),
        )

    @post("/batches/{batch_id:str}/items/{item_index:int}/label", status_code=303)
    async def set_label(
        self,
        request: Request[Any, Any, Any],
        state: State,
        store: NamedDependency[Store],
        batch_id: FromPath[str],
        item_index: FromPath[int],
        posted: NamedDependency[Posted],
    ) -> Response[Any]:
        current, form = posted.session, posted.form
        raw = str(form.get("manual_label") or "").strip()
        label = None if raw in ("", "(none)") else raw
        seen = str(form.get("seen") or "")
        _, conflict = await anyio.to_thread.run_sync(
            save_label, state, store, current.tenant, batch_id, item_index, label, seen
        )
        if conflict:
            await anyio.to_thread.run_sync(session.put_flash, store, current, {"conflict": conflict})
        target = f"{batch_base(batch_id)}/items/{item_index}?saved=1"
        return session.with_cookie(request, Redirect(target + "#labels", status_code=303))

    # --- exports ------------------------------------------------------------------------------------------------

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
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="juiz-{batch_id}.csv"'},
        )

    @get("/batches/{batch_id:str}/report.md", sync_to_thread=True)
    def export_report(
        self, request: Request[Any, Any, Any], store: NamedDependency[Store], batch_id: FromPath[str]
    ) -> Response[str]:
        record = _signed_in_batch(store, request, batch_id)
        return Response(
            render_report(store.results_in_input_order(batch_id), record.options.lang),
            media_type="text/markdown; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="juiz-{batch_id}-report.md"'},
        )


def save_label(
    state: State, store: Store, tenant: str, batch_id: str, item_index: int, label: Label | None, seen: str | None
) -> tuple[Label | None, str | None]:
    """Set an item's manual label as `tenant`: (the label it replaced, a note when that one was set by someone
    after the reader saw the item). `seen` is the manual_label_at the reader's page showed ("" for none; None: not
    known). Last write wins; the note is how the overwrite is made visible instead of silent."""
    record = owned_batch(store, tenant, batch_id)
    cache = row_cache(state, store)
    row = cache.index(record).by_index.get(item_index)
    if row is None:
        raise NotFoundException(detail=f"item {item_index} of batch {batch_id} is not graded yet")
    before, _ = set_manual_label(store, cache, record, row.position, label, tenant)
    extra = (before.model_extra if before is not None else None) or {}
    previous = None if before is None else before.manual_label
    changed_at = str(extra.get("manual_label_at") or "")
    conflict = None
    if seen is not None and changed_at and changed_at != seen and previous != label:
        conflict = (
            f"This replaced the label {previous!s} that {extra.get('manual_label_by')} set at {changed_at}, "
            "after the page was shown to you."
        )
    return previous, conflict


def manual_class_name(label: Label | None, mapping: LabelMapping) -> str | None:
    """The class a stored label stands for (`PC`, `correct`, `2` → its class), None when unset or unknown: the
    label form preselects it, so saving without a change keeps the label."""
    if label is None:
        return None
    try:
        return mapping.classes[class_of_label(label, mapping, resolve_numeric_scale([label], mapping))].name
    except InputError:
        return None


def _batch_context(
    request: Request[Any, Any, Any], state: State, store: Store, current: session.Session, batch_id: str
) -> dict[str, Any]:
    """What the batch page draws, for its filters (the query string): the whole page, or its moving parts."""
    record = owned_batch(store, current.tenant, batch_id)
    index = row_cache(state, store).index(record)
    params = request.query_params
    mapping = record.options.label_mapping
    metrics = metrics_present(index.rows) or list(record.options.metrics)
    query = Query(
        status=params.get("status", ""),
        metric=params.get("metric", "") if params.get("metric", "") in METRICS else "",
        score=_int(params.get("score")),
        label=params.get("label", ""),
        disagreement=params.get("disagreement", ""),
        min_uncertainty=_float(params.get("min_uncertainty")),
        uncertain=params.get("uncertain") == "1",
        field=params.get("field", ""),
        value=params.get("value", "").strip(),
        sort=params.get("sort", "disagreement") if params.get("sort") in SORT_KEYS else "disagreement",
        descending=params.get("dir", "desc") != "asc",
    )
    query.metric = (
        query.metric or mapping.metric or ("answer_relevance" if "answer_relevance" in metrics else metrics[0])
    )
    page = page_of(index, query, _int(params.get("page")) or 1, PER_PAGE)
    cached = sum(1 for r in index.rows if r.cached)
    agreement, complete, agreement_error = _agreement(index, store, record)
    histograms = [
        (
            m,
            charts.score_histogram(score_counts(index.rows, m), m),
            charts.expected_histogram(expected_bins(index.rows, m), m),
        )
        for m in metrics
    ]
    query_fields = [(k, v) for k, v in params.items() if k != "page"]  # the queue's "this table's order"
    page_base = urlencode([(k, v) for k, v in params.items() if k != "page"])
    sort_base = urlencode([(k, v) for k, v in params.items() if k not in ("page", "sort", "dir")])
    return dict(
        session=current,
        signed_in=not session.open_api(request),
        record=record,
        pace=pace(record, cached),
        cached=cached,
        stamp=_stamp,
        histograms=histograms,
        agreement=agreement,
        agreement_complete=complete,
        agreement_error=agreement_error,
        heat_map=None if agreement is None else charts.heat_map(agreement.confusion_matrix, agreement.classes),
        page=page,
        query=query,
        metrics=metrics,
        classes=[c.name for c in mapping.classes],
        page_base=page_base,
        query_fields=query_fields,
        sort_base=sort_base,
        sort_keys=SORT_KEYS,
        graded=index.covered,
        calibrated=any(r.calibrated_label is not None for r in index.rows),
        fields=field_names(index.rows),
    )


def _agreement(index: BatchIndex, store: Store, record: BatchRecord) -> tuple[AgreementReport | None, bool, str | None]:
    """(report, complete, why there is none): a manual label the mapping doesn't know leaves the page without
    agreement (as /agreement answers 422) instead of failing the page."""
    try:
        report, complete = agreement_of(index, store.settings.agreement_max_work, final=record.terminal)
    except InputError as exc:
        return None, True, str(exc)
    return report, complete, None


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
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r") and _float(value) is None:
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
    return owned_batch(store, session.require(store, request).tenant, batch_id)
