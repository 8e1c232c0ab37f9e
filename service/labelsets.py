"""Named labelled sets (API and web page alike): made of a batch's labelled items or of items given, exported and
imported as JSONL, and graded again as a new batch whose results carry the set's labels.

A set keeps triples; their labels are the tenant's labels of those triples (`Store.annotations`), so a label set on
any run of a triple is the set's, and a run of the set carries every label (`Results.store` attaches them).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from litestar.exceptions import ClientException, NotFoundException

from juiz.runtime.errors import InputError
from juiz.runtime.settings import Settings
from juiz.store import BatchRecord, Store
from juiz.store.annotations import UPLOADED, LabelledSetRecord
from schemas import Judgement, Triple
from schemas.annotation import Annotation
from schemas.labelsets import (
    LabelledItem,
    LabelledSetCreate,
    LabelledSetImported,
    LabelledSetRun,
    LabelledSetUpdate,
    LabelledSetView,
)
from service.intake import accept_triples, check_set_items
from service.labelling import copy_to_runs
from service.ownership import owned_batch
from service.rows import INTERNAL_FIELDS

# A result's fields that are juiz's, not the triple's: what a set keeps of a graded item is the triple as uploaded.
_JUDGEMENT_ONLY = INTERNAL_FIELDS | {UPLOADED}


def _when(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC)


def view_of(store: Store, tenant: str, record: LabelledSetRecord) -> LabelledSetView:
    """The set with how many of its triples are labelled, and by whom."""
    triples = store.annotations.set_triples(tenant, record.name)
    labels = store.annotations.of_triples(tenant, [key for key, _ in triples])
    labelled = sum(1 for key, triple in triples if key in labels or triple.manual_label is not None)
    annotators = sorted({a.annotator for annotations in labels.values() for a in annotations})
    return LabelledSetView(
        name=record.name,
        description=record.description,
        rubric=record.rubric,
        created_at=_when(record.created_at),
        updated_at=_when(record.updated_at),
        source_batch=record.source_batch,
        items=record.items,
        labelled=labelled,
        annotators=annotators,
    )


def owned_set(store: Store, tenant: str, name: str) -> LabelledSetRecord:
    record = store.annotations.get_set(tenant, name)
    if record is None:
        raise NotFoundException(detail=f"no labelled set {name!r}", extra={"field": "name"})
    return record


def triple_of(judgement: Judgement) -> Triple:
    """The triple a graded item was, as its upload gave it (its id, texts, own extra fields and upload label)."""
    extra = {k: v for k, v in (judgement.model_extra or {}).items() if k not in _JUDGEMENT_ONLY}
    uploaded = (judgement.model_extra or {}).get(UPLOADED)
    if uploaded is None and not judgement.annotations and not (judgement.model_extra or {}).get("manual_label_by"):
        uploaded = judgement.manual_label
    return Triple.model_validate(
        {
            **extra,
            "id": judgement.id,
            "question": judgement.question,
            "answer": judgement.answer,
            "context": judgement.context,
            "manual_label": uploaded,
        }
    )


def batch_triples(store: Store, record: BatchRecord, labelled_only: bool) -> list[Triple]:
    """The batch's graded items as triples (only those somebody labelled, or whose upload gave a label, when
    `labelled_only`), in input order; a triple graded twice is kept once."""
    count = store.result_count(record.id)
    entries = store.result_entries(record.id, 0, count) if count else []
    out: dict[str, tuple[int, Triple]] = {}
    for _, index, raw in sorted(entries, key=lambda e: e[1]):
        judgement = Judgement.model_validate_json(raw)
        if labelled_only and judgement.manual_label is None and not judgement.annotations:
            continue
        out.setdefault(judgement.content_key(), (index, triple_of(judgement)))
    return [triple for _, triple in out.values()]


def _checked_items(items: list[LabelledItem]) -> list[tuple[str, Triple, list[Annotation]]]:
    """(content key, triple, labels) per item; InputError naming the item when its `triple` key is not its own."""
    out = []
    for index, item in enumerate(items):
        triple = item.item()
        key = triple.content_key()
        if item.triple is not None and item.triple != key:
            raise InputError(
                "the content key does not match the item's question, answer and context",
                source="items",
                line=index,
                field="triple",
            )
        out.append((key, triple, list(item.annotations)))
    return out


def _store_items(
    store: Store, tenant: str, name: str, items: list[tuple[str, Triple, list[Annotation]]], now: float
) -> tuple[int, int]:
    """Triples added to the set and their labels to the tenant's (copied to every stored result of each triple).
    (triples new to the set, labels stored)."""
    added = store.annotations.add_to_set(tenant, name, [(key, triple) for key, triple, _ in items], now)
    labelled = set()
    stored = 0
    for key, _, given in items:
        for annotation in given:
            store.annotations.put(tenant, key, annotation)
            stored += 1
        if given:
            labelled.add(key)
    for key in sorted(labelled):
        copy_to_runs(store, tenant, key, store.annotations.of_triples(tenant, [key]).get(key, []))
    return added, stored


def create_set(store: Store, settings: Settings, tenant: str, data: LabelledSetCreate) -> LabelledSetView:
    """A new named set of the batch's (labelled) items and the items given. 409 naming `name` when the tenant has a
    set of that name; 422 naming `batch` when it is not the tenant's, or `items` when there is nothing to keep."""
    items = _checked_items(data.items)
    check_set_items([triple for _, triple, _ in items], settings)
    if data.batch is not None:
        try:
            record = owned_batch(store, tenant, data.batch)
        except NotFoundException:
            raise InputError(f"no batch {data.batch}", source="body", field="batch") from None
        items = [(t.content_key(), t, []) for t in batch_triples(store, record, data.labelled_only)] + items
    if not items:
        what = "the batch has no labelled item" if data.batch and data.labelled_only else "no items"
        raise InputError(f"{what}: a labelled set needs triples", source="body", field="items")
    now = time.time()
    if not store.annotations.create_set(tenant, data.name, now, data.description, data.rubric, data.batch or ""):
        raise ClientException(
            status_code=409, detail=f"a labelled set named {data.name!r} exists", extra={"field": "name"}
        )
    _store_items(store, tenant, data.name, items, now)
    return view_of(store, tenant, owned_set(store, tenant, data.name))


def update_set(store: Store, tenant: str, name: str, data: LabelledSetUpdate) -> LabelledSetView:
    """The set with its description and/or rubric changed; 404 naming `name` when the tenant has no such set."""
    owned_set(store, tenant, name)
    if not store.annotations.update_set(tenant, name, time.time(), data.description, data.rubric):
        owned_set(store, tenant, name)  # deleted meanwhile: the 404
    return view_of(store, tenant, owned_set(store, tenant, name))


def import_items(
    store: Store, settings: Settings, tenant: str, name: str, items: list[LabelledItem]
) -> LabelledSetImported:
    """A labelled set's JSONL lines added to the set (made when the tenant has none of that name): each triple once,
    every label kept with its author in the tenant's labels."""
    checked = _checked_items(items)
    check_set_items([triple for _, triple, _ in checked], settings)
    now = time.time()
    store.annotations.create_set(tenant, name, now)  # False: it exists, and is added to
    added, labels = _store_items(store, tenant, name, checked, now)
    return LabelledSetImported(name=name, added=added, labels=labels, items=owned_set(store, tenant, name).items)


def export_lines(store: Store, tenant: str, name: str) -> str:
    """The set as JSONL: one triple a line with its content key and every annotator's label."""
    owned_set(store, tenant, name)
    triples = store.annotations.set_triples(tenant, name)
    labels = store.annotations.of_triples(tenant, [key for key, _ in triples])
    lines = [
        LabelledItem.model_validate(
            {**triple.model_dump(exclude_none=True), "triple": key, "annotations": labels.get(key, [])}
        ).model_dump_json(exclude_none=True)
        for key, triple in triples
    ]
    return "".join(f"{line}\n" for line in lines)


def run_set(
    store: Store,
    settings: Settings,
    tenant: str,
    name: str,
    data: LabelledSetRun,
    idempotency_key: str | None = None,
) -> tuple[BatchRecord, bool]:
    """A new batch grading the set's triples with `data.options` (and whether it is new: an `idempotency_key` used
    before with the same set, triples and options gives back that batch); its results carry the triples' labels as
    they are stored, and its label queue shows the set's rubric."""
    record = owned_set(store, tenant, name)
    triples = [triple for _, triple in store.annotations.set_triples(tenant, name)]
    if not triples:
        raise InputError(f"the labelled set {name!r} holds no triple", source="path", field="name")
    submission = accept_triples(triples, data.options, data.name or name, settings)
    batch, created = store.create_batch(
        tenant,
        submission.options,
        submission.items,
        idempotency_key=idempotency_key,
        # The set's name is part of the request: the same key on another set is another request (409).
        fingerprint=f"labelset:{name}:{submission.fingerprint}",
        name=submission.name,
    )
    if created and record.rubric:
        store.annotations.set_rubric(batch.id, record.rubric)
    return batch, created
