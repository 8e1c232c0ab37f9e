"""Store records → API bodies."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from juiz.store import BatchRecord
from schemas import BatchLinks, BatchView

API_PREFIX = "/v1"


def batch_links(batch_id: str) -> BatchLinks:
    base = f"{API_PREFIX}/batches/{batch_id}"
    return BatchLinks(
        self=base,
        results=f"{base}/results",
        agreement=f"{base}/agreement",
        agreement_by_metric=f"{base}/agreement/metrics",
        calibration=f"{base}/calibration",
        report=f"{base}/report",
    )


def _stamp(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


def batch_view(record: BatchRecord, now: float | None = None) -> BatchView:
    """Pace = items finished per second since the first chunk started; ETA = what is left at that pace."""
    rate = eta = None
    done, total = record.counts.done, record.total
    if record.started_at is not None and done:
        end = (record.finished_at or record.updated_at) if record.terminal else (now or time.time())
        rate = done / max((end or record.started_at) - record.started_at, 1e-3)
        eta = 0.0 if record.terminal else round((total - done) / rate, 1)
        rate = round(rate, 4)
    return BatchView(
        id=record.id,
        name=record.name,
        status=record.status,
        counts=record.counts,
        options=record.options,
        created_at=_stamp(record.created_at) or datetime.now(UTC),
        started_at=_stamp(record.started_at),
        finished_at=_stamp(record.finished_at),
        cancelled_at=_stamp(record.cancelled_at),
        judgements_per_s=rate,
        eta_s=eta,
        links=batch_links(record.id),
    )
