"""What every response gets at the edge, whatever answered it (a handler, an exception handler, a 404 for no route,
the static files, the OpenAPI pages): security headers, and `Retry-After` on every 503 and 429.

An ASGI middleware rather than Litestar's `response_headers`: those are added to handler responses only (/ui 404
pages and /schema had no CSP). A path no route matches is answered before any middleware runs, so
the app's exception handlers add the same headers (`baseline_headers`). Headers a route already set (the web page's
own, stricter CSP) are kept.

Also here: who may read /metrics and /ready (a loopback client, or the metrics key), and the check that a request
names no query parameter its route does not declare.
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import Any

from litestar import Litestar, Request
from litestar.connection import ASGIConnection
from litestar.datastructures import MutableScopeHeaders
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException
from litestar.handlers import BaseRouteHandler
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from juiz.runtime.errors import InputError
from service.openapi import DOCS_PATH
from service.views import API_PREFIX

# The API answers JSON, never a page: nothing may load, frame or run. The documentation pages (Swagger UI) run one
# inline script Litestar writes, with the OpenAPI document in it; 'unsafe-inline' is allowed there only.
API_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'"
DOCS_CSP = (
    "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}
BUSY_STATUSES = (429, 503)


def baseline_headers(path: str) -> dict[str, str]:
    """The security headers for a response to `path`."""
    docs = path == DOCS_PATH or path.startswith(DOCS_PATH + "/")
    return {"Content-Security-Policy": DOCS_CSP if docs else API_CSP, **SECURITY_HEADERS}


def security_headers_middleware(app: ASGIApp) -> ASGIApp:
    """Litestar middleware factory: security headers on every HTTP response, Retry-After on every 503/429."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        baseline = baseline_headers(scope["path"])
        retry_after = str(scope["app"].state.settings.retry_after_s)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableScopeHeaders.from_message(message)
                for name, value in baseline.items():
                    if name.lower() not in headers:
                        headers[name] = value
                if message["status"] in BUSY_STATUSES and "retry-after" not in headers:
                    headers["Retry-After"] = retry_after
            await send(message)

        await app(scope, receive, send_with_headers)

    return middleware


def is_loopback(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def operations_guard(connection: ASGIConnection[Any, Any, Any, Any], _handler: BaseRouteHandler) -> None:
    """/metrics and /ready show worker names, the model and every tenant's volume: a loopback client (a sidecar, the
    container's own health check) or one presenting JUIZ_METRICS_KEY as a bearer token; anyone else a 401/403.
    The client address is the peer's (uvicorn rewrites it from X-Forwarded-For only for JUIZ_TRUSTED_PROXIES)."""
    if is_loopback(connection.client.host if connection.client else None):
        return
    key = connection.app.state.settings.metrics_key.get_secret_value()
    scheme, _, token = connection.headers.get("authorization", "").partition(" ")
    if not key:
        raise PermissionDeniedException(
            detail="metrics and readiness are served to loopback clients only (set JUIZ_METRICS_KEY to scrape them "
            "from elsewhere)",
            extra={"field": "Authorization"},
        )
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
        raise NotAuthorizedException(
            detail="send the metrics key: 'Authorization: Bearer <JUIZ_METRICS_KEY>'", extra={"field": "Authorization"}
        )


def declared_query_parameters(app: Litestar) -> dict[tuple[str, str], frozenset[str]]:
    """(path template, METHOD) → the query parameters its OpenAPI operation declares."""
    declared: dict[tuple[str, str], frozenset[str]] = {}
    for path, item in (app.openapi_schema.paths or {}).items():
        for method in ("get", "post", "put", "patch", "delete"):
            operation = getattr(item, method, None)
            if operation is None:
                continue
            names = {p.name for p in operation.parameters or [] if getattr(p, "param_in", None) == "query"}
            declared[(path, method.upper())] = frozenset(names)
    return declared


def index_query_parameters(app: Litestar) -> None:
    """On start-up: what `refuse_unknown_query_parameters` checks against, read once from the OpenAPI document."""
    app.state.query_parameters = declared_query_parameters(app)


async def refuse_unknown_query_parameters(request: Request[Any, Any, Any]) -> None:
    """Before a /v1 request: a query parameter its route does not declare is a 422 naming it (a misspelt `limt`
    would otherwise silently give the default)."""
    if not request.url.path.startswith(API_PREFIX):  # /health and the probes document no 422
        return
    declared = request.app.state.query_parameters.get((request.scope.get("path_template", ""), request.method))
    if declared is None:
        return
    for name in request.query_params:
        if name not in declared:
            known = ", ".join(sorted(declared)) or "none"
            raise InputError(f"unknown query parameter (known: {known})", source="query", field=name)
