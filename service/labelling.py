"""Manual labels set after submission: the one way a label is set (`set_manual_label`, for the API's PATCH and the
web page's forms alike), what a label may be, which caches a change makes stale, and the calibration a tenant saved
from its labels."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from functools import partial

from litestar.datastructures import State
from litestar.exceptions import NotFoundException

from juiz.agreement.labels import class_of_label, resolve_numeric_scale
from juiz.runtime.errors import InputError, JuizError
from juiz.store import BatchRecord, Store
from juiz.store.annotations import UPLOADED, with_annotations
from schemas import Judgement
from schemas.annotation import Annotation, AnnotationRecord, ConsensusRule
from schemas.calibration import CalibrationSpec
from schemas.labels import LabelMapping
from schemas.triple import Label
from service.ownership import owned_batch
from service.rows import RowCache, row_cache


class LabelRejected(JuizError, ValueError):
    """A label the batch's label mapping does not know."""


def check_label(label: Label | None, mapping: LabelMapping) -> None:
    """A class name or alias of the mapping, or a number on its numeric scale; None clears the label."""
    if label is None:
        return
    if isinstance(label, bool):
        raise LabelRejected("a label is a class name or a number, not true/false")
    try:
        class_of_label(label, mapping, resolve_numeric_scale([label], mapping))
    except InputError as exc:
        raise LabelRejected(exc.message) from None


def set_manual_label(
    store: Store,
    cache: RowCache,
    record: BatchRecord,
    position: int,
    label: Label | None,
    annotator: str,
    comment: str | None = None,
    metric: str | None = None,
) -> tuple[Judgement | None, Judgement]:
    """Set (None: clear) `annotator`'s own label on the graded item at `position` of the batch's results, now:
    checked against the batch's label mapping (InputError naming manual_label), kept with the tenant's labels of that
    triple (`Store.annotations`: one per annotator, nobody's replaced by another's), and every stored result of the
    triple updated: its annotations, and their consensus (the batch's rule) as its manual_label. The agreement cache
    is dropped and the page's rows updated. (The judgement before, the judgement after.)

    With `metric`, the label is about that metric alone (it joins the item's annotations; the item's manual_label,
    about the answer as a whole, is unchanged unless the batch's rule reads that metric).

    Clearing when the annotator has no label of their own clears a label the upload gave (it has no author)."""
    try:
        check_label(label, record.options.label_mapping)
    except LabelRejected as exc:
        raise InputError(str(exc), field="manual_label") from None
    before = store.results_at(record.id, [position])[0]
    if before is None:
        raise NotFoundException(detail=f"no result at {position} in batch {record.id}")
    key, now = before.content_key(), time.time()
    stamp = datetime.fromtimestamp(now, UTC)
    drop_upload = False
    if label is None:
        drop_upload = store.annotations.remove(record.tenant, key, annotator, metric) is None and metric is None
    else:
        own = Annotation(
            annotator=annotator, label=label, at=stamp, comment=(comment or "").strip() or None, metric=metric
        )
        store.annotations.put(record.tenant, key, own)
    known = store.annotations.of_triples(record.tenant, [key]).get(key, [])
    rule = store.annotations.rule(record.id)

    def change(judgement: Judgement) -> Judgement:
        if drop_upload:
            judgement = judgement.model_copy(update={UPLOADED: None, "manual_label": None})
        changed = with_annotations(judgement, known, record.options.label_mapping, rule)
        return changed.model_copy(update={"manual_label_by": annotator, "manual_label_at": stamp.isoformat()})

    judgement, version = store.labels.update(record.id, position, change)
    invalidate_agreement(store, record.id)
    cache.updated(record, position, judgement, version)
    _copy_to_other_runs(store, record, judgement, known)
    return before, judgement


def _copy_to_other_runs(store: Store, record: BatchRecord, judgement: Judgement, known: list[Annotation]) -> None:
    """The triple's labels written into its results in the tenant's other batches (each under its own rule)."""
    copy_to_runs(store, record.tenant, judgement.content_key(), known, but=record.id)


def import_labels(store: Store, tenant: str, records: list[AnnotationRecord]) -> int:
    """A labels file's lines added to the tenant's labelled set, and copied to every stored result of their
    triples. InputError for a line that names its item by id only (ids belong to one batch)."""
    for n, record in enumerate(records):
        if record.triple is None:
            raise InputError(f"line {n + 1} names no triple: give its content key", field=f"labels.{n}.triple")
    for record in records:
        assert record.triple is not None
        store.annotations.put(tenant, record.triple, record.annotation())
    for key in sorted({r.triple for r in records if r.triple is not None}):
        copy_to_runs(store, tenant, key, store.annotations.of_triples(tenant, [key]).get(key, []))
    return len(records)


def copy_to_runs(store: Store, tenant: str, key: str, known: list[Annotation], but: str = "") -> None:
    """The triple's labels written into its stored results, in every batch of the tenant but `but`."""
    for batch_id, index in store.annotations.places(tenant, key):
        if batch_id == but:
            continue
        other = store.get_batch(batch_id)
        if other is None or other.tenant != tenant:
            store.annotations.forget_place(tenant, key, batch_id, index)
            continue
        position = store.annotations.position_of(batch_id, index)
        if position is None:  # not stored yet: stored, it will carry the labels (Results.store)
            continue
        rule = store.annotations.rule(batch_id)
        mapping = other.options.label_mapping
        try:
            store.labels.update(
                batch_id, position, partial(with_annotations, annotations=known, mapping=mapping, rule=rule)
            )
        except KeyError:
            continue
        invalidate_agreement(store, batch_id)


def choose_consensus(store: Store, record: BatchRecord, rule: ConsensusRule) -> int:
    """Make `rule` the batch's consensus rule and every labelled result's manual_label its consensus. Returns how
    many results were relabelled."""
    store.annotations.set_rule(record.id, rule)
    changed = 0
    mapping = record.options.label_mapping
    for position, _, raw in store.result_entries(record.id, 0, store.result_count(record.id)):
        if '"annotations":[' not in raw:  # nobody labelled it: its manual_label is not a consensus
            continue
        known = Judgement.model_validate_json(raw).annotations or []
        store.labels.update(
            record.id, position, partial(with_annotations, annotations=known, mapping=mapping, rule=rule)
        )
        changed += 1
    store.labels.bump(record.id)
    invalidate_agreement(store, record.id)
    return changed


def save_label(
    state: State,
    store: Store,
    tenant: str,
    batch_id: str,
    item_index: int,
    label: Label | None,
    annotator: str,
    comment: str | None = None,
    metric: str | None = None,
) -> Label | None:
    """Set `annotator`'s own label on an item (None clears it): the label of theirs it replaced (what undo puts
    back). Other annotators' labels are never touched, so there is no overwrite to warn about."""
    record = owned_batch(store, tenant, batch_id)
    cache = row_cache(state, store)
    row = cache.index(record).by_index.get(item_index)
    if row is None:
        raise NotFoundException(detail=f"item {item_index} of batch {batch_id} is not graded yet")
    before, _ = set_manual_label(store, cache, record, row.position, label, annotator, comment, metric)
    previous = None if before is None else own_annotation(before, annotator, metric)
    return None if previous is None else previous.label


def own_annotation(judgement: Judgement, annotator: str, metric: str | None = None) -> Annotation | None:
    """The annotator's own label on the item: about the answer as a whole, or about `metric`."""
    return next((a for a in judgement.annotations or [] if a.annotator == annotator and a.metric == metric), None)


def manual_class_name(label: Label | None, mapping: LabelMapping) -> str | None:
    """The class a stored label stands for (`PC`, `correct`, `2` → its class), None when unset or unknown: the
    label form preselects it, so saving without a change keeps the label."""
    if label is None:
        return None
    try:
        return mapping.classes[class_of_label(label, mapping, resolve_numeric_scale([label], mapping))].name
    except InputError:
        return None


def invalidate_agreement(store: Store, batch_id: str) -> None:
    """Drop the agreement reports the API cached for the batch (service.agreement keys them per resample count)."""
    store.pages.drop_agreement_reports(batch_id)


def saved_calibration(store: Store, tenant: str) -> CalibrationSpec | None:
    """The calibration the tenant saved from a label queue's end: the upload form offers it for new batches."""
    raw = store.pages.saved_calibration(tenant)
    return None if raw is None else CalibrationSpec.model_validate_json(raw)
