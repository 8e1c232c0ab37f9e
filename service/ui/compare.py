"""/ui/compare: two of the tenant's batches side by side (the API's /v1/compare, drawn)."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

from litestar import Controller, Request, Response, get
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException

from juiz.agreement.compare import compare_runs
from juiz.store import Store
from schemas.compare import CompareReport
from service.agreement import capped_resamples
from service.ownership import owned_batch
from service.rows import _BOOTSTRAPS, PAGE_RESAMPLES, indexed_rows, row_cache
from service.ui import charts, session
from service.ui.render import html

log = logging.getLogger(__name__)

PICKABLE = 100  # the newest batches offered in the pickers
SORTS = {
    "id": lambda i: (i.id,),
    "delta": lambda i: (i.delta is None, i.delta or 0),
    "label_a": lambda i: (i.label_a is None, i.label_a or ""),
    "label_b": lambda i: (i.label_b is None, i.label_b or ""),
    "manual": lambda i: (i.manual_label is None, str(i.manual_label)),
}
STATS = [
    ("accuracy", "accuracy"),
    ("cohen_kappa", "Cohen's κ"),
    ("cohen_kappa_quadratic", "Cohen's κ (quadratic)"),
    ("spearman_rho", "Spearman ρ"),
    ("mae", "MAE (0–1)"),
]


_REPORTS: OrderedDict[tuple[Any, ...], tuple[CompareReport, bool]] = OrderedDict()
_LOCK = threading.Lock()
CACHED_REPORTS = 8


def _state(store: Store, batch_id: str) -> tuple[int, int]:
    return store.result_count(batch_id), store.labels_version(batch_id)


def compare_rows(state: State, store: Store, tenant: str, a: str, b: str, resamples: int) -> CompareReport:
    """/v1/compare's report, from the page's row indexes (kept per process) instead of the parsed results."""
    record_a, record_b = owned_batch(store, tenant, a), owned_batch(store, tenant, b)
    cache = row_cache(state, store)
    rows_a, rows_b = indexed_rows(cache.index(record_a)), indexed_rows(cache.index(record_b))
    shared = len({j.id for _, j in rows_a} & {j.id for _, j in rows_b})
    used = capped_resamples(resamples, shared, store.settings.agreement_max_work // 2)
    return compare_runs(
        a, rows_a, b, rows_b, record_a.options.label_mapping, resamples=used, judge_label=lambda j: j.automated_label
    )


def report_for(state: State, store: Store, tenant: str, a: str, b: str) -> tuple[CompareReport, bool]:
    """(report, complete): the point figures at once (well under a second on 2,000 items); the bootstrap intervals
    (seconds: two reports) in the page's background thread, as for the batch page, cached until results or labels
    of either batch change. `complete` once the intervals are in."""
    key = (tenant, a, b, *_state(store, a), *_state(store, b))
    with _LOCK:
        cached = _REPORTS.get(key)
        if cached is not None:
            _REPORTS.move_to_end(key)
            return cached
    points = compare_rows(state, store, tenant, a, b, 0)
    complete = points.shared == 0

    def remember(report: CompareReport, done: bool) -> None:
        with _LOCK:
            _REPORTS[key] = (report, done)
            while len(_REPORTS) > CACHED_REPORTS:
                _REPORTS.popitem(last=False)

    remember(points, complete)
    if not complete:

        def bootstrap() -> None:
            try:
                remember(compare_rows(state, store, tenant, a, b, PAGE_RESAMPLES), True)
            except Exception:  # never leave the page waiting: it keeps the points
                log.exception("compare bootstrap of %s and %s failed", a, b)
                remember(points, True)

        _BOOTSTRAPS.submit(bootstrap)
    return points, complete


class CompareController(Controller):
    path = "/compare"
    include_in_schema = False

    @get("/", sync_to_thread=True)
    def compare(self, request: Request[Any, Any, Any], state: State, store: NamedDependency[Store]) -> Response[Any]:
        """Pick two batches; with both, their agreement side by side, the score deltas and the changed items."""
        current = session.require(request)
        params = request.query_params
        a, b = params.get("a", ""), params.get("b", "")
        records, _ = store.list_batches(current.tenant, 0, PICKABLE)
        report, complete = None, True
        if a and b:
            try:
                report, complete = report_for(state, store, current.tenant, a, b)
            except NotFoundException:
                raise NotFoundException(detail="one of the two batches is not yours or is gone") from None
        sort = params.get("sort", "delta") if params.get("sort") in SORTS else "delta"
        descending = params.get("dir", "desc") != "asc"
        changed = []
        deltas = None
        if report is not None:
            changed = sorted(report.changed, key=SORTS[sort], reverse=descending)
            bars = [(name, count) for name, count in report.score_deltas.items() if name != "missing" or count]
            deltas = charts.bar_chart(
                bars, f"shared items per score delta (b − a): {report.shared} items", highlight=["missing"]
            )
        return html(
            "compare.html",
            session=current,
            signed_in=not session.open_api(request),
            records=records,
            a=a,
            b=b,
            report=report,
            complete=complete,
            changed=changed,
            deltas=deltas,
            stats=STATS,
            sort=sort,
            descending=descending,
            sorts=list(SORTS),
        )

    @get("/stats", sync_to_thread=True)
    def stats(self, request: Request[Any, Any, Any], state: State, store: NamedDependency[Store]) -> Response[Any]:
        """The side-by-side agreement alone: 202 while its intervals are computed, 200 once they are in (the page's
        script swaps it in then)."""
        current = session.require(request)
        a, b = request.query_params.get("a", ""), request.query_params.get("b", "")
        report, complete = report_for(state, store, current.tenant, a, b)
        return html(
            "_compare_stats.html", status_code=200 if complete else 202, report=report, complete=complete, stats=STATS
        )
