"""GET /v1/batches/{id}/agreement at a bounded cost.

The bootstrap is resamples × items work and memory (issue 10: 10,000 items × 10,000 resamples took 91 s and four
concurrent calls 3.4 GiB). So: resamples are lowered until resamples × items fits `agreement_max_work`; one report
is computed at a time per API process, in a worker thread (never on the event loop); and a finished batch's report
is computed once and kept in Redis beside the batch (same retention), so repeated calls are a GET.
"""

from __future__ import annotations

import asyncio
from functools import partial

import anyio
from redis.asyncio import Redis as AsyncRedis

from juiz.agreement import compute_agreement
from juiz.calibration import compute_calibrated_agreement
from juiz.store import BatchRecord, Store
from schemas import AgreementReport

# One bootstrap at a time per process: each one holds resamples × items integers while it runs.
_LIMITER = anyio.CapacityLimiter(1)
# Concurrent first requests for the same finished batch share one computation.
_IN_FLIGHT: dict[str, asyncio.Future[AgreementReport]] = {}


def capped_resamples(requested: int, items: int, max_work: int) -> int:
    """The resamples actually used: as many as asked, but resamples × items ≤ max_work."""
    if items <= 0:
        return requested
    return max(0, min(requested, max_work // items))


def cache_key(batch_id: str, resamples: int) -> str:
    return Store.batch_key(batch_id, f"agreement:{resamples}")


def _compute(store: Store, record: BatchRecord, requested: int) -> AgreementReport:
    judgements = store.results_in_input_order(record.id)
    resamples = capped_resamples(requested, len(judgements), store.settings.agreement_max_work)
    report = compute_agreement(judgements, record.options.label_mapping, resamples=resamples)
    # Raw vs calibrated (cross-fitted) side by side: two more bootstraps over the labelled items, within the cap.
    labelled = sum(1 for j in judgements if j.manual_label is not None)
    report.calibration = compute_calibrated_agreement(
        judgements,
        record.options.label_mapping,
        resamples=capped_resamples(requested, 2 * labelled, store.settings.agreement_max_work),
    )
    return report


async def cached_agreement(store: Store, redis: AsyncRedis, record: BatchRecord, requested: int) -> AgreementReport:
    """The batch's agreement report; from Redis when the batch is over and it was computed before."""
    if not record.terminal:  # still changing: computed each time, within the cap
        return await anyio.to_thread.run_sync(partial(_compute, store, record, requested), limiter=_LIMITER)
    key = cache_key(record.id, requested)
    cached = await redis.get(key)
    if cached is not None:
        return AgreementReport.model_validate_json(cached)
    running = _IN_FLIGHT.get(key)
    if running is not None:
        return await asyncio.shield(running)
    future: asyncio.Future[AgreementReport] = asyncio.get_running_loop().create_future()
    _IN_FLIGHT[key] = future
    try:
        report = await anyio.to_thread.run_sync(partial(_compute, store, record, requested), limiter=_LIMITER)
        retention = store.settings.retention_s
        await redis.set(key, report.model_dump_json(), ex=retention or None)
        future.set_result(report)
        return report
    except Exception as exc:
        future.set_exception(exc)
        future.exception()  # retrieved here, so a future nobody else awaited does not warn
        raise
    except BaseException:  # cancelled: whoever waits on it is cancelled too
        future.cancel()
        raise
    finally:
        del _IN_FLIGHT[key]
