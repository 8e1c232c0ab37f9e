"""/v1/labelsets: named labelled sets — triples a team labelled, kept under a name, exported and imported as JSONL,
and graded again as a new batch whose results carry the set's labels (service.labelsets)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any

import anyio
from litestar import Controller, Request, Response, delete, get, patch, post
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.openapi.spec import Operation, RequestBody
from litestar.params import HeaderParameter, JSONBody, Parameter

from juiz.runtime.errors import InputError
from juiz.store import Store
from schemas import BatchView
from schemas.labelsets import (
    LABELLED_SET_NAME_PATTERN,
    LabelledSetCreate,
    LabelledSetImport,
    LabelledSetImported,
    LabelledSetList,
    LabelledSetRun,
    LabelledSetUpdate,
    LabelledSetView,
)
from service import labelsets
from service.intake import NDJSON, READS_JSONL, document_jsonl_upload, is_jsonl, read_labelled_jsonl
from service.openapi import SECURITY, responses
from service.views import batch_view


@dataclass
class JsonlImportOperation(Operation):
    """Documents the JSONL upload beside the JSON body Litestar documented from LabelledSetImport."""

    def __post_init__(self) -> None:
        if isinstance(self.request_body, RequestBody):
            document_jsonl_upload(self.request_body, "LabelledItem")


SetName = Annotated[
    str, Parameter(pattern=LABELLED_SET_NAME_PATTERN, description="The set's name (letters, digits, '.', '_', '-').")
]


class LabelledSetController(Controller):
    path = "/v1/labelsets"
    tags = ["labels"]  # noqa: RUF012 - Litestar reads it as a class attribute
    security = SECURITY

    @get(
        "/",
        operation_id="listLabelledSets",
        sync_to_thread=True,
        responses=responses(401, 429, 503),
        summary="List labelled sets",
    )
    def list_sets(self, store: NamedDependency[Store], tenant: NamedDependency[str]) -> LabelledSetList:
        """The tenant's named labelled sets, newest first: each one's triples, how many are labelled and by whom."""
        return LabelledSetList(sets=[labelsets.view_of(store, tenant, r) for r in store.annotations.list_sets(tenant)])

    @post(
        "/",
        operation_id="createLabelledSet",
        status_code=201,
        sync_to_thread=True,
        responses=responses(401, 409, 422, 429, 503),
        summary="Create a labelled set",
    )
    def create(
        self,
        state: State,
        store: NamedDependency[Store],
        tenant: NamedDependency[str],
        data: JSONBody[LabelledSetCreate],
    ) -> LabelledSetView:
        """A new named set: the triples of `batch`'s labelled items (all its graded items with `labelled_only`
        false) and the `items` given, with their labels. 409 naming `name` when the tenant has a set of that name;
        422 naming `batch` when it is not the tenant's batch, `items` when the set would be empty."""
        return labelsets.create_set(store, state.settings, tenant, data)

    @get(
        "/{name:str}",
        operation_id="getLabelledSet",
        sync_to_thread=True,
        responses=responses(401, 404, 422, 429, 503),
        summary="A labelled set",
    )
    def get_set(self, store: NamedDependency[Store], tenant: NamedDependency[str], name: SetName) -> LabelledSetView:
        """One named set."""
        return labelsets.view_of(store, tenant, labelsets.owned_set(store, tenant, name))

    @patch(
        "/{name:str}",
        operation_id="updateLabelledSet",
        sync_to_thread=True,
        responses=responses(401, 404, 422, 429, 503),
        summary="Change a labelled set's description or rubric",
    )
    def update_set(
        self,
        store: NamedDependency[Store],
        tenant: NamedDependency[str],
        name: SetName,
        data: JSONBody[LabelledSetUpdate],
    ) -> LabelledSetView:
        """Set the description and/or the rubric (a field left out stays); runs started afterwards show the new
        rubric in their label queue, earlier runs keep theirs."""
        return labelsets.update_set(store, tenant, name, data)

    @delete(
        "/{name:str}",
        operation_id="deleteLabelledSet",
        sync_to_thread=True,
        responses=responses(401, 404, 422, 429, 503),
        summary="Delete a labelled set",
    )
    def delete_set(self, store: NamedDependency[Store], tenant: NamedDependency[str], name: SetName) -> None:
        """Forget the named set. Its triples' labels stay the tenant's (/v1/labels), and its runs stay."""
        labelsets.owned_set(store, tenant, name)
        store.annotations.delete_set(tenant, name)

    @get(
        "/{name:str}/items",
        operation_id="exportLabelledSet",
        sync_to_thread=True,
        media_type=NDJSON,
        responses=responses(401, 404, 422, 429, 503),
        summary="Export a labelled set (JSONL)",
    )
    def export(self, store: NamedDependency[Store], tenant: NamedDependency[str], name: SetName) -> str:
        """The set as JSONL: one triple a line (its fields as uploaded), its content key (`triple`) and every
        annotator's label on it (`annotations`). What POST /v1/labelsets/{name}/items reads back."""
        return labelsets.export_lines(store, tenant, name)

    @post(
        "/{name:str}/items",
        operation_id="importLabelledSet",
        status_code=200,
        opt={READS_JSONL: True},
        operation_class=JsonlImportOperation,
        responses=responses(401, 413, 415, 422, 429, 503),
        summary="Import into a labelled set (JSONL or JSON)",
    )
    async def import_items(
        self,
        request: Request[Any, Any, Any],
        state: State,
        store: NamedDependency[Store],
        tenant: NamedDependency[str],
        name: SetName,
        data: JSONBody[LabelledSetImport | None] = None,
    ) -> LabelledSetImported:
        """Add lines of a labelled set's JSONL (`Content-Type: application/x-ndjson`, as the export writes them) or
        a JSON `{items}` to the named set, made when the tenant has none: each triple once, each label kept with its
        author in the tenant's labels and copied to every stored result of its triple. A bad line is a 422 naming
        its line and field; a `triple` key that isn't the line's own triple is refused."""
        if is_jsonl(request.headers.get("content-type") or ""):
            body = await request.body()
            items = await anyio.to_thread.run_sync(read_labelled_jsonl, body, state.settings)
        elif data is None:
            raise InputError("expected a JSON object in the request body", source="body")
        else:
            items = data.items
        return await anyio.to_thread.run_sync(
            partial(labelsets.import_items, store, state.settings, tenant, name, items)
        )

    @post(
        "/{name:str}/runs",
        operation_id="gradeLabelledSet",
        status_code=202,
        sync_to_thread=True,
        responses=responses(401, 404, 409, 413, 422, 429, 503),
        summary="Grade a labelled set",
    )
    def run(
        self,
        state: State,
        store: NamedDependency[Store],
        tenant: NamedDependency[str],
        name: SetName,
        data: JSONBody[LabelledSetRun],
        idempotency_key: Annotated[str | None, HeaderParameter(name="Idempotency-Key", required=False)] = None,
    ) -> Response[BatchView]:
        """Grade the set's triples with these options as a new batch (named after the set unless `name` is given);
        its results carry every label of the set's triples, and its label queue the set's rubric. 202 with the batch,
        as POST /v1/batches; with an `Idempotency-Key`, the same key, set and body give back the same batch (a retry
        never grades the set twice) and another set or body is a 409."""
        record, created = labelsets.run_set(store, state.settings, tenant, name, data, idempotency_key)
        view = batch_view(record)
        headers = {"Location": view.links.self}
        if not created:
            headers["Idempotent-Replayed"] = "true"
        return Response(view, status_code=202, headers=headers)
