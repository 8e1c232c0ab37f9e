"""Manual labels set after submission: the one way a label is set (`set_manual_label`, for the API's PATCH and the
web page's forms alike), what a label may be, which caches a change makes stale, and the calibration a tenant saved
from its labels."""

from __future__ import annotations

import time

from litestar.datastructures import State
from litestar.exceptions import NotFoundException

from juiz.agreement.labels import class_of_label, resolve_numeric_scale
from juiz.runtime.errors import InputError, JuizError
from juiz.store import BatchRecord, Store
from schemas import Judgement
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
    store: Store, cache: RowCache, record: BatchRecord, position: int, label: Label | None, tenant: str
) -> tuple[Judgement | None, Judgement]:
    """Set (None: clear) the label of the graded item at `position` of the batch's results, as `tenant`, now: checked
    against the batch's label mapping (InputError naming manual_label), stored with who and when, the agreement
    cache dropped, the page's rows updated. (The judgement before, the judgement after.)"""
    try:
        check_label(label, record.options.label_mapping)
    except LabelRejected as exc:
        raise InputError(str(exc), field="manual_label") from None
    before = store.results_at(record.id, [position])[0]
    judgement, version = store.set_manual_label(record.id, position, label, tenant, time.time())
    invalidate_agreement(store, record.id)
    cache.updated(record, position, judgement, version)
    return before, judgement


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


def invalidate_agreement(store: Store, batch_id: str) -> None:
    """Drop the agreement reports the API cached for the batch (service.agreement keys them per resample count)."""
    store.pages.drop_agreement_reports(batch_id)


def saved_calibration(store: Store, tenant: str) -> CalibrationSpec | None:
    """The calibration the tenant saved from a label queue's end: the upload form offers it for new batches."""
    raw = store.pages.saved_calibration(tenant)
    return None if raw is None else CalibrationSpec.model_validate_json(raw)
