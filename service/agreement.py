"""GET /v1/batches/{id}/agreement (and /agreement/metrics, /calibration) at a bounded cost.

The bootstrap is resamples × items work and memory (10,000 items × 10,000 resamples took 91 s and four
concurrent calls 3.4 GiB). So: resamples are lowered until resamples × items fits `agreement_max_work`; reports are
computed in worker threads (never on the event loop), one at a time per batch and at most `agreement_threads` at a
time per API process (one tenant's big batch no longer holds up every other batch's report); and a
finished batch's report is computed once and kept in Redis beside the batch (same retention), so repeated calls are
a GET.

This module owns those cached reports. Their key holds the batch's labels_version (bumped by every manual-label
change, `Store.set_manual_label`), so a relabelled batch's reports of every kind are computed afresh; nothing has to
remember to invalidate them.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

import anyio
from pydantic import BaseModel

from juiz.agreement.annotators import inter_annotator
from juiz.agreement.consensus import apply_consensus
from juiz.agreement.statistics import compute_agreement, compute_agreement_by_metric, metric_columns
from juiz.calibration.agreement import compute_calibrated_agreement
from juiz.calibration.fitting import fit_from_results
from juiz.runtime.errors import InputError
from juiz.store import BatchRecord, Store
from schemas import AgreementByMetric, AgreementReport, CalibrationSpec, Judgement
from schemas.annotation import ConsensusRule
from schemas.labels import LabelMapping

Report = TypeVar("Report", bound=BaseModel)

# The process-wide budget (agreement_threads bootstraps at once: each holds resamples × items integers), created on
# first use for the settings' value.
_BUDGETS: dict[int, anyio.CapacityLimiter] = {}
# One computation at a time per batch: a batch's requests queue behind each other, not behind other batches'.
_BATCH_LOCKS: weakref.WeakValueDictionary[str, anyio.Lock] = weakref.WeakValueDictionary()
# Concurrent first requests for the same finished batch share one computation.
_IN_FLIGHT: dict[str, asyncio.Future[Any]] = {}


async def _in_thread(store: Store, batch_id: str, compute: Callable[[], Report]) -> Report:
    """Run `compute` in a worker thread: one per batch at a time, within the process-wide budget."""
    threads = store.settings.agreement_threads
    budget = _BUDGETS.get(threads)
    if budget is None:
        budget = _BUDGETS[threads] = anyio.CapacityLimiter(threads)
    lock = _BATCH_LOCKS.get(batch_id)
    if lock is None:
        lock = _BATCH_LOCKS[batch_id] = anyio.Lock()
    async with lock:
        return await anyio.to_thread.run_sync(compute, limiter=budget)


def capped_resamples(requested: int, items: int, max_work: int) -> int:
    """The resamples actually used: as many as asked, but resamples × items ≤ max_work."""
    if items <= 0:
        return requested
    return max(0, min(requested, max_work // items))


def cache_key(batch_id: str, resamples: int, kind: str = "agreement", labels_version: int = 0) -> str:
    # Under `agreement:` for every kind, so a scan for the batch's agreement keys finds them all.
    return Store.batch_key(batch_id, f"agreement:v{labels_version}:{kind}:{resamples}")


def _plain(store: Store, record: BatchRecord, requested: int) -> AgreementReport:
    judgements = store.results_in_input_order(record.id)
    resamples = capped_resamples(requested, len(judgements), store.settings.agreement_max_work)
    report = compute_agreement(judgements, record.options.label_mapping, resamples=resamples)
    name_reference(report, judgements, record.options.label_mapping, store.annotations.rule(record.id))
    # Raw vs calibrated (cross-fitted) side by side: two more bootstraps over the labelled items, within the cap.
    labelled = sum(1 for j in judgements if j.manual_label is not None)
    report.calibration = compute_calibrated_agreement(
        judgements,
        record.options.label_mapping,
        resamples=capped_resamples(requested, 2 * labelled, store.settings.agreement_max_work),
    )
    return report


def name_reference(
    report: AgreementReport, judgements: Sequence[Judgement], mapping: LabelMapping, rule: ConsensusRule
) -> None:
    """Name what the judge was compared with, and (when items carry several annotators' labels) add the annotators'
    own agreement: the manual labels are already the rule's consensus (`Store.annotations`)."""
    if not any(j.annotations for j in judgements):
        return
    try:
        consensus = apply_consensus(judgements, mapping, rule)
        report.annotators = inter_annotator(judgements, mapping, consensus)
    except InputError:
        return
    report.reference = rule.describe()


def _by_metric(store: Store, record: BatchRecord, requested: int) -> AgreementByMetric:
    judgements = store.results_in_input_order(record.id)
    mapping = record.options.label_mapping
    # One bootstrap per column (score and expected score of each metric, and of the verdict): all within the cap.
    columns = max(1, metric_columns(judgements, mapping))
    resamples = capped_resamples(requested, columns * len(judgements), store.settings.agreement_max_work)
    return compute_agreement_by_metric(judgements, mapping, resamples=resamples)


@dataclass(frozen=True)
class _Kind(Generic[Report]):
    name: str
    compute: Callable[[Store, BatchRecord, int], Report]
    model: type[Report]


PLAIN = _Kind("agreement", _plain, AgreementReport)
BY_METRIC = _Kind("agreement-by-metric", _by_metric, AgreementByMetric)


async def _cached(store: Store, record: BatchRecord, requested: int, kind: _Kind[Report]) -> Report:
    """The batch's report of this kind; from Redis when the batch is over and it was computed before."""
    compute = partial(kind.compute, store, record, requested)
    if not record.terminal:  # still changing: computed each time, within the cap
        return await _in_thread(store, record.id, compute)
    # Read before the results are: a report computed while a label changes is stored under the older version.
    version = await store.reads.labels_version(record.id)
    key = cache_key(record.id, requested, kind.name, version)
    cached = await store.reads.cached(key)
    if cached is not None:
        return kind.model.model_validate_json(cached)
    running = _IN_FLIGHT.get(key)
    if running is not None:
        return await asyncio.shield(running)
    future: asyncio.Future[Report] = asyncio.get_running_loop().create_future()
    _IN_FLIGHT[key] = future
    try:
        report = await _in_thread(store, record.id, compute)
        retention = store.settings.retention_s
        await store.reads.cache(key, report.model_dump_json(), retention or None)
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


async def cached_agreement(store: Store, record: BatchRecord, requested: int) -> AgreementReport:
    return await _cached(store, record, requested, PLAIN)


async def cached_agreement_by_metric(store: Store, record: BatchRecord, requested: int) -> AgreementByMetric:
    return await _cached(store, record, requested, BY_METRIC)


async def fitted_calibration(store: Store, record: BatchRecord, folds: int, seed: int) -> CalibrationSpec:
    """A calibration fitted on the batch's labelled results (what `juiz calibrate` writes): CalibrationUnavailable
    when the labels can't support one. Cross-fitting is k small fits: off the event loop, one at a time."""

    def fit() -> CalibrationSpec:
        judgements = store.results_in_input_order(record.id)
        calibration = fit_from_results(judgements, record.options.label_mapping, folds=folds, seed=seed)
        return CalibrationSpec.model_validate(calibration.to_json())

    return await _in_thread(store, record.id, fit)
