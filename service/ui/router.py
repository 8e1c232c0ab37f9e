"""The /ui router: pages, static files, security headers, and errors answered as pages instead of JSON.

Content-Security-Policy: nothing but this origin's own files (no inline script or style, no frames, no external
request of any kind); forms may post only here. Pages are not cached (they show a tenant's data).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from litestar import Request, Response, Router
from litestar.datastructures import CacheControlHeader, ResponseHeader
from litestar.exceptions import HTTPException, NotFoundException
from litestar.response import Redirect
from litestar.static_files import create_static_files_router

from juiz.errors import InputError
from service.ui.pages import UIController
from service.ui.render import html
from service.ui.session import CsrfRejected, SignInRequired

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer would make Chromium send `Origin: null` on our own forms
    "X-Frame-Options": "DENY",
}


async def no_store(response: Response[Any]) -> Response[Any]:
    """Pages and their JSON show a tenant's data: not kept by the browser's or any proxy's cache."""
    if isinstance(response, Response):
        response.headers.setdefault("Cache-Control", "no-store")
    return response


def _sign_in(_: Request[Any, Any, Any], __: SignInRequired) -> Response[Any]:
    return Redirect("/ui/signin", status_code=303)


def _csrf(_: Request[Any, Any, Any], exc: CsrfRejected) -> Response[Any]:
    log.warning("web page request refused: %s", exc)
    return html(
        "error.html",
        status_code=403,
        title="Refused",
        detail="The form was stale or came from elsewhere: reload the page and try again.",
    )


def _input(_: Request[Any, Any, Any], exc: InputError) -> Response[Any]:
    return html("error.html", status_code=422, title="Not accepted", detail=str(exc))


def _http(_: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    title = "Not found" if isinstance(exc, NotFoundException) else "Error"
    detail = "internal error" if exc.status_code >= 500 else exc.detail
    return html("error.html", status_code=exc.status_code, title=title, detail=detail)


def ui_router() -> Router:
    static = create_static_files_router(
        path="/static", directories=[STATIC], name="ui-static", cache_control=CacheControlHeader(max_age=3600)
    )
    return Router(
        path="/ui",
        route_handlers=[UIController, static],
        after_request=no_store,
        response_headers=[ResponseHeader(name=name, value=value) for name, value in SECURITY_HEADERS.items()],
        exception_handlers={
            SignInRequired: _sign_in,
            CsrfRejected: _csrf,
            InputError: _input,
            HTTPException: _http,
        },
        include_in_schema=False,
    )
