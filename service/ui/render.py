"""Templates: Jinja with autoescape on for every template, so every user string (questions, answers, segments, the
judge's reasoning, ids, labels) is HTML-escaped; only the SVG charts, built with `markupsafe.escape`, are Markup."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from litestar import Response
from litestar.enums import MediaType

ENV = Environment(
    loader=PackageLoader("service.ui", "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "–" if value is None else format(value, spec)


def _when(value: object) -> str:
    """A stored timestamp (ISO text, a datetime or epoch seconds) to the minute, in UTC: what a reader wants to see
    of when a label was set, without microseconds."""
    if value is None or value == "":
        return ""
    try:
        if isinstance(value, datetime):
            moment = value
        elif isinstance(value, int | float):
            moment = datetime.fromtimestamp(value, UTC)
        else:
            moment = datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M UTC")


ENV.filters["fmt"] = _fmt
ENV.filters["when"] = _when


def html(template: str, status_code: int = 200, **context: Any) -> Response[Any]:
    body = ENV.get_template(template).render(**context)
    return Response(body, media_type=MediaType.HTML, status_code=status_code)


def fragment(template: str, **context: Any) -> str:
    """A part of a page, as text: what the page's script swaps in while a batch runs."""
    return ENV.get_template(template).render(**context)


def stamp(value: float | None) -> str:
    """A stored time (epoch seconds) as the pages show it, in UTC."""
    return "" if value is None else datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def batch_base(batch_id: str) -> str:
    """The batch's page; its item, queue and export pages hang under it."""
    return f"/ui/batches/{batch_id}"
