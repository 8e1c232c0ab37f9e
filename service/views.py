"""Store records → API bodies."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from juiz.judging.progress import eta_s
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
        events=f"{base}/events",
    )


def _stamp(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


def batch_view(record: BatchRecord, now: float | None = None) -> BatchView:
    """Pace = items finished per second since the first chunk started. ETA = what is left at the rate so far: of
    the conversations' estimated work once the workers report it (an item is many conversations of very different
    costs, so this moves within the first item: juiz.judging.progress), else of items."""
    rate = eta = None
    done, total = record.counts.done, record.total
    progress = record.progress
    clock = now or time.time()
    if record.started_at is not None and done:
        end = (record.finished_at or record.updated_at) if record.terminal else clock
        rate = done / max((end or record.started_at) - record.started_at, 1e-3)
        eta = 0.0 if record.terminal else round((total - done) / rate, 1)
        rate = round(rate, 4)
    if record.started_at is not None and (progress.done or progress.work_done) and not record.terminal:
        elapsed = max(clock - record.started_at, 1e-3)
        eta = eta_s(
            progress.done,
            progress.planned,
            progress.items_seen,
            total,
            elapsed,
            progress.work_done,
            progress.work_planned,
        )
    # Results stored and, between a call's end and its store, graded: briefly both (clamped).
    items_done = min(total, done + progress.items_in_flight_done)
    reported = progress.reported
    return BatchView(
        items_done=items_done,
        conversations_done=progress.done if reported else None,
        conversations_planned=progress.planned if reported else None,
        planning_complete=record.terminal or (progress.items_seen >= total and not progress.open),
        tokens_written=progress.written if reported else None,
        tokens_read=progress.read if reported else None,
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
