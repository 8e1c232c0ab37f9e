"""Which batches a tenant may see: the one check every controller and page makes before reading a batch."""

from __future__ import annotations

from litestar.exceptions import NotFoundException

from juiz.store import BatchRecord, Store


def owned_batch(store: Store, tenant: str, batch_id: str) -> BatchRecord:
    """The tenant's batch, or 404 — also for another tenant's batch, whose existence is not revealed."""
    record = store.get_batch(batch_id)
    if record is None or record.tenant != tenant:
        raise NotFoundException(detail=f"no batch {batch_id}", extra={"field": "batch_id"})
    return record
