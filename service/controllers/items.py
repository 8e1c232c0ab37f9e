"""/v1/batches/{id}/items/{item_id}: manual labels set where the grades are read (the web page uses the same path
through the store)."""

from __future__ import annotations

from litestar import Controller, patch
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.exceptions import HTTPException, NotFoundException
from litestar.params import FromPath, JSONBody

from juiz.store import Store
from schemas.annotation import ItemLabelView, LabelChange
from service.controllers.batches import BatchId
from service.labelling import set_manual_label
from service.openapi import responses
from service.ownership import owned_batch
from service.rows import row_cache


class ConflictException(HTTPException):
    status_code = 409


class ItemController(Controller):
    path = "/v1/batches/{batch_id:str}/items"
    tags = ["batches"]  # noqa: RUF012 - Litestar reads it as a class attribute

    @patch(
        "/{item_id:str}",
        operation_id="setManualLabel",
        sync_to_thread=True,
        responses=responses(401, 404, 409, 415, 422, 429, 503),  # every status it answers (schemathesis checks)
        summary="Set a manual label",
    )
    def set_manual_label(
        self,
        state: State,
        store: NamedDependency[Store],
        tenant: NamedDependency[str],
        annotator: NamedDependency[str],
        batch_id: BatchId,
        item_id: FromPath[str],
        data: JSONBody[LabelChange],
    ) -> ItemLabelView:
        """Set or change (or, with null, clear) the caller's own label on a graded item (each key's holder is one
        annotator; another's label is never replaced), recording who set it and when; the item's manual_label is
        the consensus of its annotators' labels. Results, exports, the report and agreement read the new label. 404
        for an unknown batch or item, 409 for an item not graded yet, 422 for a body or label the batch's label
        mapping does not accept. With `metric`, the label is about that metric alone: it joins the item's
        annotations (shown per metric in the batch page's agreement) and leaves the item's manual_label as it was. With
        repeated item ids, the first item graded with that id is changed."""
        record = owned_batch(store, tenant, batch_id)
        cache = row_cache(state, store)
        row = cache.index(record).by_id.get(item_id)
        if row is None:
            if store.find_item_index(batch_id, item_id) is not None:
                raise ConflictException(
                    detail=f"item {item_id} is not graded yet; set its label once it is", extra={"field": "item_id"}
                )
            raise NotFoundException(detail=f"no item {item_id} in batch {batch_id}", extra={"field": "item_id"})
        _, judgement = set_manual_label(
            store, cache, record, row.position, data.manual_label, annotator, data.comment, data.metric
        )
        extra = judgement.model_extra or {}
        return ItemLabelView(
            batch_id=batch_id,
            item_id=item_id,
            index=row.index,
            manual_label=judgement.manual_label,
            manual_label_by=extra["manual_label_by"],
            manual_label_at=extra["manual_label_at"],
            automated_label=judgement.automated_label,
        )
