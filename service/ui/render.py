"""Templates: Jinja with autoescape on for every template, so every user string (questions, answers, segments, the
judge's reasoning, ids, labels) is HTML-escaped; only the SVG charts, built with `markupsafe.escape`, are Markup."""

from __future__ import annotations

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


ENV.filters["fmt"] = _fmt


def html(template: str, status_code: int = 200, **context: Any) -> Response[Any]:
    body = ENV.get_template(template).render(**context)
    return Response(body, media_type=MediaType.HTML, status_code=status_code)


def fragment(template: str, **context: Any) -> str:
    """A part of a page, as text: what the page's script swaps in while a batch runs."""
    return ENV.get_template(template).render(**context)
