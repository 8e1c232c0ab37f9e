"""What the pages read from a query string or a form: numbers that may be blank or mistyped (read as None, not a
400), and the items table's filter and order, which the batch page's query and the label queue's form both send."""

from __future__ import annotations

from typing import Any

from schemas.judgement import METRICS
from service.rows import SORT_KEYS, Query


def int_param(value: str | None) -> int | None:
    return int(value) if value not in (None, "") and str(value).lstrip("-").isdigit() else None


def float_param(value: str | None) -> float | None:
    try:
        return None if value in (None, "") else float(str(value))
    except ValueError:
        return None


def table_query(fields: Any) -> Query:
    """The items table's filter and order from a query string or a form (anything with `.get`); unknown metrics and
    sort keys fall back to the defaults."""
    return Query(
        status=str(fields.get("status") or ""),
        metric=str(fields.get("metric") or "") if fields.get("metric") in METRICS else "",
        score=int_param(fields.get("score")),
        label=str(fields.get("label") or ""),
        disagreement=str(fields.get("disagreement") or ""),
        min_uncertainty=float_param(fields.get("min_uncertainty")),
        uncertain=fields.get("uncertain") == "1",
        field=str(fields.get("field") or ""),
        value=str(fields.get("value") or "").strip(),
        search=str(fields.get("q") or "").strip(),
        sort=str(fields.get("sort")) if fields.get("sort") in SORT_KEYS else "disagreement",
        descending=fields.get("dir", "desc") != "asc",
    )
