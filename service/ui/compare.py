"""/ui/compare: two of the tenant's batches side by side (the API's /v1/compare, drawn: service.comparison)."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

from litestar import Controller, Request, Response, get
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException

from juiz.store import Store
from schemas.compare import ComparedItem, CompareReport
from service.comparison import Comparison, compare_loaded, load_runs
from service.ownership import owned_batch
from service.rows import _BOOTSTRAPS, PAGE_RESAMPLES
from service.ui import charts, session
from service.ui.params import int_param
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


_REPORTS: OrderedDict[tuple[Any, ...], tuple[Comparison, bool]] = OrderedDict()
_LOCK = threading.Lock()
CACHED_REPORTS = 8


def _state(store: Store, batch_id: str) -> tuple[int, int]:
    return store.result_count(batch_id), store.labels_version(batch_id)


def comparison_for(store: Store, tenant: str, a: str, b: str) -> tuple[Comparison, bool]:
    """(comparison, complete): /v1/compare's computation (service.comparison). The point figures at once; the
    bootstrap intervals (seconds: two reports) in the page's background thread, as for the batch page, cached until
    results or labels of either batch change. `complete` once the intervals are in."""
    key = (tenant, a, b, *_state(store, a), *_state(store, b))
    with _LOCK:
        cached = _REPORTS.get(key)
        if cached is not None:
            _REPORTS.move_to_end(key)
            return cached
    runs = load_runs(store, tenant, a, b)
    points = compare_loaded(store, runs, 0)
    complete = points.report.shared == 0

    def remember(comparison: Comparison, done: bool) -> None:
        with _LOCK:
            _REPORTS[key] = (comparison, done)
            while len(_REPORTS) > CACHED_REPORTS:
                _REPORTS.popitem(last=False)

    remember(points, complete)
    if not complete:

        def bootstrap() -> None:
            try:
                remember(compare_loaded(store, runs, PAGE_RESAMPLES), True)
            except Exception:  # never leave the page waiting: it keeps the points
                log.exception("compare bootstrap of %s and %s failed", a, b)
                remember(points, True)

        _BOOTSTRAPS.submit(bootstrap)
    return points, complete


class CompareController(Controller):
    path = "/compare"
    include_in_schema = False

    @get("/", sync_to_thread=True)
    def compare(self, request: Request[Any, Any, Any], store: NamedDependency[Store]) -> Response[Any]:
        """Pick two batches; with both, their agreement side by side, the score deltas and the changed items."""
        current = session.require(request)
        params = request.query_params
        a, b = params.get("a", ""), params.get("b", "")
        records, _ = store.list_batches(current.tenant, 0, PICKABLE)
        comparison, complete = None, True
        if a and b:
            try:
                comparison, complete = comparison_for(store, current.tenant, a, b)
            except NotFoundException:
                raise NotFoundException(detail="one of the two batches is not yours or is gone") from None
        report = None if comparison is None else comparison.report
        sort = params.get("sort", "delta") if params.get("sort") in SORTS else "delta"
        descending = params.get("dir", "desc") != "asc"
        show = params.get("show", "changed") if params.get("show") in SHOWS else "changed"
        changed: list[ComparedItem] = []
        deltas = None
        movements: list[tuple[str, str, int]] = []
        if comparison is not None and report is not None:
            changed = sorted(comparison.listed(show), key=SORTS[sort], reverse=descending)
            movements = [(key, title, _count(report, key)) for key, title in SHOWS.items()]
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
            show=show,
            show_title=SHOWS[show],
            movements=movements,
            describe=describe_options,
        )

    @get("/item", sync_to_thread=True)
    def item(self, request: Request[Any, Any, Any], store: NamedDependency[Store]) -> Response[Any]:
        """One item of two runs side by side: each run's grades, reasoning and evidence, and the labels."""
        current = session.require(request)
        params = request.query_params
        a, b = params.get("a", ""), params.get("b", "")
        ia, ib = int_param(params.get("ia")), int_param(params.get("ib"))
        sides = []
        for batch_id, index in ((a, ia), (b, ib)):
            record = owned_batch(store, current.tenant, batch_id)
            position = None if index is None else store.annotations.position_of(batch_id, index)
            judgement = None if position is None else store.results_at(batch_id, [position])[0]
            if judgement is None:
                raise NotFoundException(detail=f"item {index} of batch {batch_id} is not graded")
            sides.append((record, index, judgement))
        return html(
            "compare_item.html", session=current, signed_in=not session.open_api(request), a=a, b=b, sides=sides
        )

    @get("/stats", sync_to_thread=True)
    def stats(self, request: Request[Any, Any, Any], store: NamedDependency[Store]) -> Response[Any]:
        """The side-by-side agreement alone: 202 while its intervals are computed, 200 once they are in (the page's
        script swaps it in then)."""
        current = session.require(request)
        a, b = request.query_params.get("a", ""), request.query_params.get("b", "")
        comparison, complete = comparison_for(store, current.tenant, a, b)
        return html(
            "_compare_stats.html",
            status_code=200 if complete else 202,
            report=comparison.report,
            complete=complete,
            stats=STATS,
        )


SHOWS = {
    "changed": "Items whose judge label changed",
    "fixed": "Fixed: the verdict moved toward the label",
    "regressed": "Regressed: the verdict moved away from the label",
    "unchanged": "Unchanged: the same verdict, right or wrong",
    "sideways": "Sideways: changed, neither nearer nor farther from the label",
}


def _count(report: CompareReport, show: str) -> int:
    return len(report.changed) if show == "changed" else len(getattr(report, show))


def describe_options(record: Any) -> str:
    """A run's options in a few words, for the picker: prompt or metrics, mode, samples."""
    options = record.options
    prompt = ",".join(options.prompt) if isinstance(options.prompt, list) else options.prompt
    parts = [prompt or ",".join(options.metrics)]
    for name in ("mode", "samples"):
        value = getattr(options, name, None)
        if value not in (None, "", 1):
            parts.append(f"{name} {value}")
    return " · ".join(str(p) for p in parts)
