"""/v1/compare: two of the tenant's batches side by side on the items they share by id."""

from __future__ import annotations

import anyio
from litestar import Controller, get
from litestar.di import NamedDependency
from litestar.params import Parameter

from juiz.agreement.compare import compare_runs
from juiz.store import Store
from schemas import Judgement
from schemas.compare import CompareReport
from service.agreement import capped_resamples
from service.controllers.batches import Resamples
from service.openapi import BATCH_ID_PATTERN, responses
from service.ownership import owned_batch

_LIMITER = anyio.CapacityLimiter(1)  # a compare is two bootstraps: one at a time per process


def indexed_results(store: Store, batch_id: str) -> list[tuple[int, Judgement]]:
    """(input index, judgement) of every stored result."""
    count = store.result_count(batch_id)
    if not count:
        return []
    return [(index, Judgement.model_validate_json(raw)) for _, index, raw in store.result_entries(batch_id, 0, count)]


def compare_batches(store: Store, tenant: str, a: str, b: str, resamples: int) -> CompareReport:
    """Both batches must be the tenant's (else 404). Batch a's label mapping names the classes of both."""
    record_a, record_b = owned_batch(store, tenant, a), owned_batch(store, tenant, b)
    results_a, results_b = indexed_results(store, record_a.id), indexed_results(store, record_b.id)
    shared = len({j.id for _, j in results_a} & {j.id for _, j in results_b})
    # Two reports over the shared items: each gets half the work budget.
    used = capped_resamples(resamples, shared, store.settings.agreement_max_work // 2)
    return compare_runs(a, results_a, b, results_b, record_a.options.label_mapping, resamples=used)


class CompareController(Controller):
    path = "/v1/compare"
    tags = ["batches"]  # noqa: RUF012 - Litestar reads it as a class attribute

    @get(
        "/",
        operation_id="compareBatches",
        responses=responses(401, 404, 422, 429, 503),  # 422: an unknown query parameter
        summary="Compare two runs",
    )
    async def compare(
        self,
        store: NamedDependency[Store],
        tenant: NamedDependency[str],
        a: str = Parameter(pattern=BATCH_ID_PATTERN, description="The first batch (the reference run)."),
        b: str = Parameter(
            pattern=BATCH_ID_PATTERN, description="The second batch (e.g. a re-run with another prompt)."
        ),
        resamples: Resamples = 1000,
    ) -> CompareReport:
        """Two batches on the items they share by `id`: each one's agreement with the manual labels (batch a's
        label, else b's) on those same items with bootstrap CIs, the score deltas (b − a), and the items whose judge
        label changed. Resamples × items is capped by `agreement_max_work` as for /agreement."""
        return await anyio.to_thread.run_sync(compare_batches, store, tenant, a, b, resamples, limiter=_LIMITER)
