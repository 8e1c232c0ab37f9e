"""The batches page: a tenant's batches (paged, with their progress), a new batch from an uploaded file and the
form's options, renaming and cancelling a batch."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Annotated, Any

import anyio
from litestar import Controller, Request, Response, get, post
from litestar.datastructures import UploadFile
from litestar.di import NamedDependency
from litestar.params import FromPath, QueryParameter
from litestar.response import Redirect

from juiz.formats.options import OPTIONS, options_from_text
from juiz.formats.readers import JSONL_SUFFIXES, REPORT_SUFFIXES, read_triples
from juiz.runtime.errors import InputError, PromptError
from juiz.store import BatchRecord, Store
from schemas import MAX_NAME_CHARS
from schemas.judgement import METRICS
from service.errors import LimitExceeded
from service.intake import read_name, read_submission
from service.labelling import saved_calibration
from service.ownership import owned_batch
from service.ui import session
from service.ui.batch_page import conversations_text, eta_text, pace
from service.ui.render import batch_base, html, stamp
from service.ui.session import Posted
from service.views import batch_view

BATCHES_PER_PAGE = 25
UPLOAD_SUFFIXES = (*JSONL_SUFFIXES, ".json", ".csv", *REPORT_SUFFIXES)


def upload_name(filename: str) -> str:
    """A batch's default name: its file's name without the folder or the suffix (what the form's script fills in)."""
    return Path(filename.replace("\\", "/")).stem[:MAX_NAME_CHARS].strip()


class BatchListController(Controller):
    """The batches page: the list with live progress, the upload form, renaming and cancelling."""

    path = "/"
    include_in_schema = False

    @get("/batches", sync_to_thread=True)
    def batches(
        self,
        request: Request[Any, Any, Any],
        store: NamedDependency[Store],
        page: Annotated[int, QueryParameter(ge=1)] = 1,
    ) -> Response[Any]:
        current = session.require(request)
        flash = session.pop_flash(request)
        # A refused upload, redirected here: its error and the form as it was sent.
        if flash is not None and "error" in flash:
            return self._batches_page(request, store, current, page, flash["error"], flash["form"], 422)
        return self._batches_page(request, store, current, page)

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
            stamp=stamp,
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
            session.put_flash(request, {"error": str(exc), "form": values})
            return Redirect("/ui/batches#new-title", status_code=303)
        return Redirect(batch_base(record.id), status_code=303)

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
        current = session.require(request)
        view = batch_view(owned_batch(store, current.tenant, batch_id))
        return {
            "status": view.status.value,
            "terminal": view.status.value in {"done", "failed", "cancelled"},
            **view.counts.model_dump(),
            "judgements_per_s": view.judgements_per_s,
            "eta_s": view.eta_s,
            "items_done": view.items_done,
            "conversations_done": view.conversations_done,
            "conversations_planned": view.conversations_planned,
            "planning_complete": view.planning_complete,
            "tokens_written": view.tokens_written,
            "tokens_read": view.tokens_read,
            "conversations": conversations_text(view),
            "eta": eta_text(view),
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
