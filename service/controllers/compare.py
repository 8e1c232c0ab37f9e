"""/v1/compare: two of the tenant's batches side by side on the items they share (service.comparison, as the page)."""

from __future__ import annotations

import anyio
from litestar import Controller, get
from litestar.di import NamedDependency
from litestar.params import Parameter

from juiz.store import Store
from schemas.compare import CompareReport
from service.comparison import compare_batches
from service.controllers.batches import Resamples
from service.openapi import BATCH_ID_PATTERN, responses

_LIMITER = anyio.CapacityLimiter(1)  # a compare is two bootstraps: one at a time per process


def _report(store: Store, tenant: str, a: str, b: str, resamples: int) -> CompareReport:
    return compare_batches(store, tenant, a, b, resamples).report


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
        """Two batches on the items they share by `id` (by the triple's content when they share no id): each one's
        agreement with the manual labels on those same items with bootstrap CIs (a label belongs to its triple: where
        both runs graded the same triple, batch a's label, else b's; where b's answer differs, b's own), the score
        deltas (b − a), and the items whose judge label changed. Resamples × items is capped by `agreement_max_work`
        as for /agreement. The web page's /ui/compare shows the same computation."""
        return await anyio.to_thread.run_sync(_report, store, tenant, a, b, resamples, limiter=_LIMITER)
