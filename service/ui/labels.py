"""Manual labels set after submission: what a label may be, which caches a change makes stale, and the calibration
a tenant saved from its labels."""

from __future__ import annotations

from juiz.errors import InputError, JuizError
from juiz.labels import class_of_label, resolve_numeric_scale
from juiz.store import PREFIX, Store
from schemas.calibration import CalibrationSpec
from schemas.labels import LabelMapping
from schemas.triple import Label


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


def invalidate_agreement(store: Store, batch_id: str) -> None:
    """Drop the agreement reports the API cached for the batch (service.agreement keys them per resample count)."""
    pattern = Store.batch_key(batch_id, "agreement:*")
    stale = list(store.redis.scan_iter(match=pattern, count=1000))
    if stale:
        store.redis.delete(*stale)


def saved_calibration_key(tenant: str) -> str:
    return f"{PREFIX}:ui:calibration:{tenant}"


def saved_calibration(store: Store, tenant: str) -> CalibrationSpec | None:
    """The calibration the tenant saved from a label queue's end: the upload form offers it for new batches."""
    raw = store.redis.get(saved_calibration_key(tenant))
    return None if raw is None else CalibrationSpec.model_validate_json(raw)
