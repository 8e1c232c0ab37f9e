"""The /ui router: pages, static files, security headers, and errors answered as pages instead of JSON.

Content-Security-Policy: nothing but this origin's own files (no inline script or style, no frames, no external
request of any kind); forms may post only here. Pages are not cached (they show a tenant's data).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from litestar import Request, Response, Router
from litestar.datastructures import CacheControlHeader, ResponseHeader
from litestar.di import Provide
from litestar.exceptions import HTTPException, NotFoundException, PermissionDeniedException, ValidationException
from litestar.response import Redirect
from litestar.static_files import create_static_files_router
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from juiz.runtime.errors import InputError
from juiz.runtime.settings import Settings
from service.errors import http_exception as api_http_exception
from service.errors import redis_down as api_redis_down
from service.ui.annotate import AnnotationController
from service.ui.batch_list import BatchListController
from service.ui.batch_page import BatchPageController
from service.ui.compare import CompareController
from service.ui.exports import ExportController
from service.ui.item_page import ItemPageController
from service.ui.labelsets import LabelledSetPageController
from service.ui.render import html
from service.ui.session import (
    UI_PATH,
    CsrfRejected,
    SignInRequired,
    csrf_middleware,
    posted_form,
    safe_next,
    session_middleware,
)
from service.ui.signin import SignInController

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


def _sign_in(request: Request[Any, Any, Any], _: SignInRequired) -> Response[Any]:
    """A page goes to the sign-in form, which brings the reader back here after; the page's own script (polling)
    gets a 401 it can show, instead of a redirect to a form it can't read (session loss was silent)."""
    back = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    signin = f"/ui/signin?{urlencode({'next': back})}" if safe_next(back) and request.method == "GET" else "/ui/signin"
    if request.headers.get("x-juiz-fetch") or "application/json" in request.headers.get("accept", ""):
        return Response({"detail": "signed out", "signin": signin}, status_code=401)
    return Redirect(signin, status_code=303)


def _error_page(status_code: int, title: str, detail: str) -> Response[Any]:
    # An exception handler's response skips the router's response_headers: the page's own headers, set here.
    response = html("error.html", status_code=status_code, title=title, detail=detail)
    response.headers.update({**SECURITY_HEADERS, "Cache-Control": "no-store"})
    return response


def _csrf(_: Request[Any, Any, Any], exc: CsrfRejected | PermissionDeniedException) -> Response[Any]:
    log.warning("web page request refused: %s", exc)
    return _error_page(403, "Refused", "The form was stale or came from elsewhere: reload the page and try again.")


def _input(_: Request[Any, Any, Any], exc: InputError) -> Response[Any]:
    return _error_page(422, "Not accepted", str(exc))


def _invalid(_: Request[Any, Any, Any], exc: ValidationException) -> Response[Any]:
    # The app's handler answers these with the API's JSON 422; the page answers with its own page.
    first = exc.extra[0] if isinstance(exc.extra, list) and exc.extra and isinstance(exc.extra[0], dict) else {}
    where = f" ({first['key']}: {first.get('message', '')})" if first.get("key") else ""
    return _error_page(422, "Not accepted", f"{exc.detail}{where}")


def _http(_: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    title = "Not found" if isinstance(exc, NotFoundException) else "Error"
    detail = "internal error" if exc.status_code >= 500 else exc.detail
    response = _error_page(exc.status_code, title, detail)
    response.headers.update({k: v for k, v in (exc.headers or {}).items() if k.lower() == "retry-after"})
    return response


def http_exception(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    """The app-wide HTTP error handler: a path under /ui that no route matched (routing fails before the /ui
    router's own handlers run) gets the page's HTML error instead of the API's JSON."""
    if request.url.path == UI_PATH or request.url.path.startswith(f"{UI_PATH}/"):
        return _http(request, exc)
    return api_http_exception(request, exc)


def _store_down(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """Redis unreachable: the API's message, as a page (the API answers the same with JSON)."""
    log.error("Redis unreachable: %s", exc)
    retry_after = request.app.state.settings.retry_after_s
    response = _error_page(
        503, "The store is unreachable", f"The queue store (Redis) is unreachable; try again in {retry_after} s."
    )
    response.headers["Retry-After"] = str(retry_after)
    return response


def redis_down(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """The app-wide Redis handler: a path under /ui (met before its router's handlers, e.g. in a middleware) gets
    the page; the API its JSON."""
    if request.url.path == UI_PATH or request.url.path.startswith(f"{UI_PATH}/"):
        return _store_down(request, exc)
    return api_redis_down(request, exc)


def ui_router(settings: Settings) -> Router:
    static = create_static_files_router(
        path="/static", directories=[STATIC], name="ui-static", cache_control=CacheControlHeader(max_age=3600)
    )
    return Router(
        path="/ui",
        route_handlers=[
            SignInController,
            BatchListController,
            BatchPageController,
            ItemPageController,
            ExportController,
            AnnotationController,
            CompareController,
            LabelledSetPageController,
            static,
        ],
        dependencies={"posted": Provide(posted_form)},  # the signed-in session's form
        # Litestar's session (outside) and CSRF middleware, the latter with our Origin check (service.ui.session)
        middleware=[session_middleware(settings), csrf_middleware(settings)],
        after_request=no_store,
        response_headers=[ResponseHeader(name=name, value=value) for name, value in SECURITY_HEADERS.items()],
        exception_handlers={
            SignInRequired: _sign_in,
            CsrfRejected: _csrf,
            PermissionDeniedException: _csrf,  # Litestar's CSRF middleware: a missing or wrong token
            InputError: _input,
            ValidationException: _invalid,
            HTTPException: _http,
            RedisConnectionError: _store_down,
            RedisTimeoutError: _store_down,
        },
        include_in_schema=False,
    )
