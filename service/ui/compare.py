"""/ui/compare: two of the tenant's batches side by side (the API's /v1/compare, drawn)."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, get
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException

from juiz.store import Store
from service.controllers.compare import compare_batches
from service.ui import charts, session
from service.ui.render import html
from service.ui.rows import PAGE_RESAMPLES

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


class CompareController(Controller):
    path = "/compare"
    include_in_schema = False

    @get("/", sync_to_thread=True)
    def compare(self, request: Request[Any, Any, Any], store: NamedDependency[Store]) -> Response[Any]:
        """Pick two batches; with both, their agreement side by side, the score deltas and the changed items."""
        current = session.require(store, request)
        params = request.query_params
        a, b = params.get("a", ""), params.get("b", "")
        records, _ = store.list_batches(current.tenant, 0, PICKABLE)
        report = None
        if a and b:
            try:
                report = compare_batches(store, current.tenant, a, b, PAGE_RESAMPLES)
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
        return session.with_cookie(
            request,
            html(
                "compare.html",
                session=current,
                signed_in=not session.open_api(request),
                records=records,
                a=a,
                b=b,
                report=report,
                changed=changed,
                deltas=deltas,
                stats=STATS,
                sort=sort,
                descending=descending,
                sorts=list(SORTS),
            ),
        )
