"""One item's page: its segments, the answer, each metric's reasoning, its labels, and the form that sets the manual
label."""

from __future__ import annotations

import json
from typing import Any

import anyio
from litestar import Controller, Request, Response, get, post
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException
from litestar.params import FromPath
from litestar.response import Redirect

from juiz.runtime.errors import InputError
from juiz.store import Store
from schemas import Judgement
from schemas.judgement import METRICS
from service.labelling import manual_class_name, own_annotation, save_label
from service.ownership import owned_batch
from service.rows import (
    INTERNAL_FIELDS,
    row_cache,
)
from service.ui import session
from service.ui.render import batch_base, html
from service.ui.session import Posted


class ItemPageController(Controller):
    """One item: its segments, answer, each metric's reasoning and labels, and the form that sets its label."""

    path = "/"
    include_in_schema = False

    @get("/batches/{batch_id:str}/items/{item_index:int}", sync_to_thread=True)
    def item(
        self,
        request: Request[Any, Any, Any],
        state: State,
        store: NamedDependency[Store],
        batch_id: FromPath[str],
        item_index: FromPath[int],
    ) -> Response[Any]:
        current = session.require(request)
        record = owned_batch(store, current.tenant, batch_id)
        index = row_cache(state, store).index(record)
        flash = session.pop_flash(request) or {}
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
        return html(
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
            annotations=(judgement.annotations or []) if judgement is not None else [],
            own=own_annotation(judgement, current.author) if judgement is not None else None,
            own_by_metric={
                a.metric: a for a in (judgement.annotations or []) if a.annotator == current.author and a.metric
            }
            if judgement is not None
            else {},
            me=current.author,
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
        comment = str(form.get("comment") or "")
        metric = str(form.get("metric") or "") or None
        if metric is not None and metric not in METRICS:
            raise InputError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}", field="metric")
        await anyio.to_thread.run_sync(
            save_label, state, store, current.tenant, batch_id, item_index, label, current.author, comment, metric
        )
        target = f"{batch_base(batch_id)}/items/{item_index}?saved=1"
        return Redirect(target + "#labels", status_code=303)
