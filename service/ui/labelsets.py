"""/ui/labelsets: the tenant's named labelled sets (the API's /v1/labelsets, as forms): a set kept from a batch's
labelled items, imported from a JSONL file, exported, and graded again with the options chosen here."""

from __future__ import annotations

from typing import Any

import anyio
from litestar import Controller, Request, Response, get, post
from litestar.datastructures import UploadFile
from litestar.di import NamedDependency
from litestar.params import FromPath
from litestar.response import Redirect
from pydantic import ValidationError

from juiz.formats.options import OPTIONS, options_from_text
from juiz.runtime.errors import InputError
from juiz.store import Store
from schemas.judgement import METRICS
from schemas.labelsets import (
    MAX_DESCRIPTION_CHARS,
    MAX_RUBRIC_CHARS,
    LabelledSetCreate,
    LabelledSetRun,
    LabelledSetUpdate,
)
from service import labelsets
from service.intake import read_labelled_jsonl, read_options
from service.ui import session
from service.ui.render import batch_base, html
from service.ui.session import Posted

EXPORT_TYPE = "application/x-ndjson"


def _validated(model: Any, data: dict[str, Any]) -> Any:
    """The form read into the API's body type: InputError naming the field (the page's 422) when it isn't one."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InputError.from_validation(exc, source="form") from None


class LabelledSetPageController(Controller):
    path = "/labelsets"
    include_in_schema = False

    @get("/", sync_to_thread=True)
    def sets(self, request: Request[Any, Any, Any], store: NamedDependency[Store]) -> Response[Any]:
        """Every named set with its size, labels and annotators; forms to import one, and to grade one again."""
        current = session.require(request)
        views = [labelsets.view_of(store, current.tenant, r) for r in store.annotations.list_sets(current.tenant)]
        return html(
            "labelsets.html",
            session=current,
            signed_in=not session.open_api(request),
            sets=views,
            metrics=METRICS,
            imported=request.query_params.get("imported"),
            max_description=MAX_DESCRIPTION_CHARS,
            max_rubric=MAX_RUBRIC_CHARS,
        )

    @post("/", status_code=303, sync_to_thread=True)
    def create(self, posted: NamedDependency[Posted], store: NamedDependency[Store]) -> Response[Any]:
        """A set of a batch's labelled items (the batch page's form)."""
        current, form = posted.session, posted.form
        data = _validated(
            LabelledSetCreate,
            {
                "name": str(form.get("name") or "").strip(),
                "batch": str(form.get("batch") or "") or None,
                "rubric": str(form.get("rubric") or ""),
                "description": str(form.get("description") or ""),
            },
        )
        labelsets.create_set(store, store.settings, current.tenant, data)
        return Redirect(f"/ui/labelsets#set-{data.name}", status_code=303)

    @post("/{name:str}", status_code=303, sync_to_thread=True)
    def update(
        self, posted: NamedDependency[Posted], store: NamedDependency[Store], name: FromPath[str]
    ) -> Response[Any]:
        """The set's description and rubric, as the row's form left them."""
        current, form = posted.session, posted.form
        data = _validated(
            LabelledSetUpdate,
            {"description": str(form.get("description") or ""), "rubric": str(form.get("rubric") or "")},
        )
        labelsets.update_set(store, current.tenant, name, data)
        return Redirect(f"/ui/labelsets#set-{name}", status_code=303)

    @post("/import", status_code=303)
    async def import_file(self, posted: NamedDependency[Posted], store: NamedDependency[Store]) -> Response[Any]:
        """A labelled set's JSONL file (another deployment's export) added to the set named in the form."""
        current, form = posted.session, posted.form
        name = str(form.get("name") or "").strip()
        upload = form.get("file")
        if not isinstance(upload, UploadFile) or not upload.filename:
            raise InputError("choose a JSONL file to import", field="file")
        content = await upload.read()
        _validated(LabelledSetCreate, {"name": name})  # the name's rules, before the file is read

        def store_items() -> int:
            items = read_labelled_jsonl(content, store.settings)
            return labelsets.import_items(store, store.settings, current.tenant, name, items).added

        added = await anyio.to_thread.run_sync(store_items)
        return Redirect(f"/ui/labelsets?imported={added}#set-{name}", status_code=303)

    @get("/{name:str}/export", sync_to_thread=True)
    def export(
        self, request: Request[Any, Any, Any], store: NamedDependency[Store], name: FromPath[str]
    ) -> Response[Any]:
        """The set as a JSONL file: its triples and every label, as GET /v1/labelsets/{name}/items."""
        current = session.require(request)
        body = labelsets.export_lines(store, current.tenant, name)
        disposition = f'attachment; filename="{name}.labelled.jsonl"'  # the name's pattern allows no quote
        return Response(body, media_type=EXPORT_TYPE, headers={"Content-Disposition": disposition})

    @post("/runs", status_code=303, sync_to_thread=True)
    def run(self, posted: NamedDependency[Posted], store: NamedDependency[Store]) -> Response[Any]:
        """Grade the form's set again with the form's options: a new batch, its results carrying the set's labels."""
        current, form = posted.session, posted.form
        name = str(form.get("set") or "")
        texts = {key: [str(v) for v in form.getall(key, []) if str(v).strip()] for key in OPTIONS}
        options = read_options(options_from_text({k: v for k, v in texts.items() if v}, source="form"))
        data = _validated(LabelledSetRun, {"options": options, "name": str(form.get("batch_name") or "") or None})
        record, _ = labelsets.run_set(store, store.settings, current.tenant, name, data)
        return Redirect(batch_base(record.id), status_code=303)
