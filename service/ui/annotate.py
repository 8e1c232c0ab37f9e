"""/ui annotation: the label queue of a batch (see service.ui.queue), and from its end a calibration fitted on the
labels and saved for the tenant's next batches (the API's own fit, `GET /v1/batches/{id}/calibration`)."""

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

from juiz.calibration.fitting import CalibrationUnavailable
from juiz.runtime.errors import InputError
from juiz.store import Store
from schemas.annotation import ConsensusRule
from service.agreement import fitted_calibration
from service.labelling import choose_consensus, manual_class_name, own_annotation, save_label
from service.ownership import owned_batch
from service.rows import agreement_of, row_cache
from service.ui import queue as label_queue
from service.ui import session
from service.ui.params import int_param, table_query
from service.ui.render import batch_base, html, stamp
from service.ui.session import Posted

MAX_QUEUE = 500
MAX_RUBRIC = 8000
CALIBRATION_FOLDS = 5


class AnnotationController(Controller):
    path = "/batches/{batch_id:str}"
    include_in_schema = False

    @post("/queue", status_code=303)
    async def start(
        self,
        request: Request[Any, Any, Any],
        state: State,
        store: NamedDependency[Store],
        batch_id: FromPath[str],
        posted: NamedDependency[Posted],
    ) -> Response[Any]:
        """Start a queue: the items most worth a label, or (order=table) the table's filter and order."""
        current, form = posted.session, posted.form
        size = min(max(int_param(str(form.get("size") or "")) or label_queue.DEFAULT_SIZE, 1), MAX_QUEUE)
        k = int_param(str(form.get("k") or "")) or 1
        named = " ".join(str(form.get("annotator") or "").split())[: session.MAX_NAME_CHARS]
        if named and session.open_api(request):
            session.name_annotator(request, named)
        annotator = (named if named and session.open_api(request) else "") or current.author

        def make() -> label_queue.LabelQueue:
            record = owned_batch(store, current.tenant, batch_id)
            index = row_cache(state, store).index(record)
            if form.get("order") == "table":
                items = label_queue.in_table_order(index, table_query(form), size)
            else:
                items = label_queue.worth_a_label(index, size)
            return label_queue.start(store, current.id, batch_id, items, annotator, k)

        queue = await anyio.to_thread.run_sync(make)
        return Redirect(f"{batch_base(batch_id)}/queue/{queue.id}", status_code=303)

    @get("/queue/{queue_id:str}", sync_to_thread=True)
    def page(
        self,
        request: Request[Any, Any, Any],
        state: State,
        store: NamedDependency[Store],
        batch_id: FromPath[str],
        queue_id: FromPath[str],
    ) -> Response[Any]:
        current = session.require(request)
        record = owned_batch(store, current.tenant, batch_id)
        queue = label_queue.load(store, current.id, batch_id, queue_id)
        if queue is None:
            raise NotFoundException(detail="this label queue is over or belongs to another session: start a new one")
        index = row_cache(state, store).index(record)
        mapping = record.options.label_mapping
        flash = session.pop_flash(request) or {}
        item_index, held = label_queue.serve(store, index, queue)
        label_queue.save(store, current.id, queue)
        context: dict[str, Any] = {
            "held": held if item_index is None else 0,
            "annotator": queue.annotator or current.author,
            "rubric": store.annotations.rubric(batch_id),
            "session": current,
            "signed_in": not session.open_api(request),
            "record": record,
            "queue": queue,
            "labelled": label_queue.labelled(index, queue),
            "keys": label_queue.keys_for(mapping),
            "conflict": flash.get("conflict"),
            "judgement": None,
            "agreement": None,
        }
        if item_index is None:
            report, _ = agreement_of(index, store.settings.agreement_max_work, final=False)
            context["agreement"] = report
        else:
            row = index.by_index[item_index]
            judgement = store.results_at(batch_id, [row.position])[0]
            assert judgement is not None
            extra = judgement.model_extra or {}
            own = own_annotation(judgement, queue.annotator or current.author)
            context.update(
                judgement=judgement,
                item_index=item_index,
                own=own,
                manual_class=manual_class_name(judgement.manual_label, mapping),
                own_class=None if own is None else manual_class_name(own.label, mapping),
                label_by=extra.get("manual_label_by"),
                label_at=extra.get("manual_label_at"),
                segments=judgement.context if isinstance(judgement.context, list) else [],
                context_text=judgement.context if isinstance(judgement.context, str) else "",
            )
        return html("queue.html", **context)

    @post("/queue/{queue_id:str}", status_code=303)
    async def step(
        self,
        request: Request[Any, Any, Any],
        state: State,
        store: NamedDependency[Store],
        batch_id: FromPath[str],
        queue_id: FromPath[str],
        posted: NamedDependency[Posted],
    ) -> Response[Any]:
        """One step: label (and advance), skip, or undo the last step (its previous label put back)."""
        current, form = posted.session, posted.form
        action = str(form.get("action") or "")

        def run() -> None:
            queue = label_queue.load(store, current.id, batch_id, queue_id)
            if queue is None:
                raise NotFoundException(detail="this label queue is over or belongs to another session")
            item_index = queue.current
            # A stale tab posting for an item the queue has moved past does nothing.
            posted = int_param(str(form.get("item") or ""))
            if action in ("label", "skip") and (item_index is None or posted != item_index):
                return
            author = queue.annotator or current.author
            if action == "label" and item_index is not None:
                label = str(form.get("label") or "")
                comment = str(form.get("comment") or "")
                previous = save_label(state, store, current.tenant, batch_id, item_index, label, author, comment)
                queue.steps.append(label_queue.Step(item_index, "label", previous))
                label_queue.release(store, queue, item_index)
                queue.at += 1
            elif action == "skip" and item_index is not None:
                queue.steps.append(label_queue.Step(item_index, "skip"))
                label_queue.release(store, queue, item_index)
                queue.at += 1
            elif action == "undo" and queue.steps:
                last = queue.steps.pop()
                if last.kind == "label":
                    save_label(state, store, current.tenant, batch_id, last.index, last.previous, author)
                queue.at = max(queue.at - 1, 0)
                # the item goes back to where the reader is, whatever the queue's order became meanwhile
                if last.index in queue.items:
                    queue.items.remove(last.index)
                queue.items.insert(queue.at, last.index)
            label_queue.save(store, current.id, queue)

        await anyio.to_thread.run_sync(run)
        return Redirect(f"{batch_base(batch_id)}/queue/{queue_id}#item", status_code=303)

    @post("/consensus", status_code=303)
    async def consensus(
        self,
        request: Request[Any, Any, Any],
        state: State,
        store: NamedDependency[Store],
        batch_id: FromPath[str],
        posted: NamedDependency[Posted],
    ) -> Response[Any]:
        """Choose the label the judge is compared with where several annotators labelled an item."""
        current, form = posted.session, posted.form
        try:
            rule = ConsensusRule.parse(str(form.get("consensus") or "majority").strip())
        except ValueError as exc:
            raise InputError(str(exc), field="consensus") from None

        def run() -> None:
            record = owned_batch(store, current.tenant, batch_id)
            choose_consensus(store, record, rule)
            row_cache(state, store).forget(batch_id)

        await anyio.to_thread.run_sync(run)
        return Redirect(f"{batch_base(batch_id)}#agreement", status_code=303)

    @post("/rubric", status_code=303)
    async def rubric(
        self,
        request: Request[Any, Any, Any],
        store: NamedDependency[Store],
        batch_id: FromPath[str],
        posted: NamedDependency[Posted],
    ) -> Response[Any]:
        """What C, P and I mean for this batch, in the team's words: shown above every item of its label queues."""
        current, form = posted.session, posted.form
        text = str(form.get("rubric") or "")[:MAX_RUBRIC]

        def run() -> None:
            owned_batch(store, current.tenant, batch_id)
            store.annotations.set_rubric(batch_id, text)

        await anyio.to_thread.run_sync(run)
        return Redirect(f"{batch_base(batch_id)}#agreement", status_code=303)

    @post("/calibration", status_code=200)
    async def fit(
        self,
        request: Request[Any, Any, Any],
        store: NamedDependency[Store],
        batch_id: FromPath[str],
        posted: NamedDependency[Posted],
    ) -> Response[Any]:
        """Fit a calibration on the batch's labels (the API's fit) and show its held-out figures, with a button to
        save it for the next batches. The fitted file is kept for this session until then."""
        current = posted.session
        record = await anyio.to_thread.run_sync(owned_batch, store, current.tenant, batch_id)
        try:
            spec = await fitted_calibration(store, record, CALIBRATION_FOLDS, 0)
        except CalibrationUnavailable as exc:
            return html(
                "calibration.html", session=current, signed_in=not session.open_api(request), record=record,
                spec=None, error=str(exc), status_code=409,
            )  # fmt: skip
        await anyio.to_thread.run_sync(store.pages.keep_fitted, current.id, spec.model_dump_json())
        return html(
            "calibration.html", session=current, signed_in=not session.open_api(request), record=record, spec=spec,
            error=None, figures=json.dumps(spec.cross_fitted, indent=2, default=str), stamp=stamp,
        )  # fmt: skip

    @post("/calibration/save", status_code=303)
    async def save(
        self,
        request: Request[Any, Any, Any],
        store: NamedDependency[Store],
        batch_id: FromPath[str],
        posted: NamedDependency[Posted],
    ) -> Response[Any]:
        """Keep the calibration just fitted as the tenant's: the upload form uses it for new batches."""
        current = posted.session
        await anyio.to_thread.run_sync(owned_batch, store, current.tenant, batch_id)
        raw = await anyio.to_thread.run_sync(store.pages.fitted, current.id)
        if raw is None:
            raise NotFoundException(detail="no fitted calibration to save: fit it again")
        await anyio.to_thread.run_sync(store.pages.save_calibration, current.tenant, raw)
        return Redirect("/ui/batches?calibration=saved#new-title", status_code=303)
