"""Every error the API answers, mapped to HTTP in this one place. Bodies are `schemas.ErrorBody` and name the field.

juiz.runtime.errors.InputError        422  field, and the item's index (JSON body) or line (JSONL upload)
juiz.runtime.errors.PromptError       422  field options.prompt
LimitExceeded                 413  limit max_items, with the maximum
RequestEntityTooLarge         413  limit max_body_bytes (Litestar stops reading the body there)
juiz.runtime.errors.IdempotencyConflict 409 field Idempotency-Key
ValidationException (Litestar) 422 a typed body, path or query parameter Litestar refused (its default is 400)
HTTPException (Litestar)      its own status (401, 404 …), field when known
redis ConnectionError         503  Redis is unreachable
redis OutOfMemoryError        507  Redis is full (maxmemory, noeviction): writes refused, reads still answered
redis ReadOnlyError, MISCONF  503  Redis refuses writes (a replica; a snapshot that failed)
any other exception           500  logged with its traceback and a request id, which the body carries
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.types import ExceptionHandlersMap
from pydantic import ValidationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from juiz.runtime.errors import IdempotencyConflict, InputError, JuizError, PromptError
from juiz.runtime.retry import REDIS_REFUSED, write_refused
from schemas import ErrorBody
from service.edge import baseline_headers
from service.metrics import STORE_REFUSED

log = logging.getLogger(__name__)

REQUEST_ID_HEADER = "X-Request-ID"
_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")  # a caller's id is echoed only when it is this plain
ITEMS_SOURCE = "items"  # InputError.source for an item of a JSON body: its `line` is the item's 0-based index


class LimitExceeded(JuizError):
    """A configured limit (JUIZ_MAX_ITEMS …) was exceeded."""

    def __init__(self, limit: str, maximum: int, actual: int | None = None, what: str = "items") -> None:
        self.limit = limit
        self.maximum = maximum
        got = f" (got {actual})" if actual is not None else ""
        super().__init__(f"too many {what}: at most {maximum} allowed by {limit}{got}")


def _respond(body: ErrorBody, headers: dict[str, str] | None = None, path: str = "") -> Response[Any]:
    # The security headers too: a 404 for a path no route matches never passes through service.edge's middleware.
    return Response(
        body.model_dump(exclude_none=True),
        status_code=body.status_code,
        headers={**baseline_headers(path), **(headers or {})},
    )


def input_error(_: Request[Any, Any, Any], exc: InputError) -> Response[Any]:
    body = ErrorBody(status_code=422, detail=str(exc), field=exc.field)
    if exc.source == ITEMS_SOURCE:
        body.index = exc.line
        body.detail = f"items[{exc.line}]" + (f".{exc.field}" if exc.field else "") + f": {exc.message}"
    elif exc.line is not None:
        body.line = exc.line
    return _respond(body)


def prompt_error(_: Request[Any, Any, Any], exc: PromptError) -> Response[Any]:
    return _respond(ErrorBody(status_code=422, detail=str(exc), field="options.prompt"))


def limit_exceeded(_: Request[Any, Any, Any], exc: LimitExceeded) -> Response[Any]:
    return _respond(ErrorBody(status_code=413, detail=str(exc), limit=exc.limit, maximum=exc.maximum))


def body_too_large(request: Request[Any, Any, Any], _: RequestEntityTooLarge) -> Response[Any]:
    maximum = request.app.state.settings.max_body_bytes
    detail = f"request body is larger than {maximum} bytes (max_body_bytes, env JUIZ_MAX_BODY_BYTES)"
    return _respond(ErrorBody(status_code=413, detail=detail, limit="max_body_bytes", maximum=maximum))


def idempotency_conflict(_: Request[Any, Any, Any], exc: IdempotencyConflict) -> Response[Any]:
    return _respond(ErrorBody(status_code=409, detail=str(exc), field="Idempotency-Key"))


def http_exception(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    body = ErrorBody(status_code=exc.status_code, detail=exc.detail)
    if isinstance(exc.extra, dict):
        body.field = exc.extra.get("field")
    if exc.status_code >= 500:
        body.detail = "internal error"
    return _respond(body, headers=exc.headers, path=request.url.path)


def body_error(exc: ValidationError) -> InputError:
    """A typed body pydantic refused → the InputError juiz's own checks raise: the first bad field, and an item of
    `items` by its index (`items.3.question` → item 3, field question)."""
    error = InputError.from_validation(exc, source="body")
    head, _, rest = (error.field or "").partition(".")
    index, _, field = rest.partition(".")
    if head == "items" and index.isdigit():
        return InputError(error.message, source=ITEMS_SOURCE, line=int(index), field=field or None)
    return error


def validation_failed(request: Request[Any, Any, Any], exc: ValidationException) -> Response[Any]:
    """What Litestar refused while reading a typed body (`data: Model`) or a parameter: 422 naming the field, as for
    every other bad input (Litestar's own default is a 400)."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ValidationError):
        cause = cause.__cause__  # Litestar's ValidationException ← its msgspec error ← pydantic's ValidationError
    if cause is not None:
        return input_error(request, body_error(cause))
    first = exc.extra[0] if isinstance(exc.extra, list) and exc.extra and isinstance(exc.extra[0], dict) else {}
    key = first.get("key")
    if key == "data":  # no body at all
        return _respond(ErrorBody(status_code=422, detail="expected a JSON object in the request body"))
    detail = f"{exc.detail}: {first.get('message', '')}".rstrip(": ")
    return _respond(ErrorBody(status_code=422, detail=detail, field=key), path=request.url.path)


def redis_down(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    log.error("Redis unreachable: %s", exc)
    retry_after = request.app.state.settings.retry_after_s
    detail = f"the queue store (Redis) is unreachable; try again in {retry_after} s"
    return _respond(ErrorBody(status_code=503, detail=detail), headers={"Retry-After": str(retry_after)})


def store_refused(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """Redis is up but refuses writes: 507 when it is full (more memory, or a purge, cures it), 503 otherwise (a
    replica, a failed snapshot), both with Retry-After; never a 500. Reads do not reach here: Redis answers them."""
    if not write_refused(exc):
        return internal_error(request, exc)
    full = isinstance(exc, OutOfMemoryError) or getattr(exc, "status_code", None) == "OOM"
    STORE_REFUSED.labels("full" if full else "refused").inc()
    log.error("Redis refused a write (%s): %s", type(exc).__name__, exc)
    retry_after = request.app.state.settings.retry_after_s
    why = "is full (maxmemory)" if full else "refuses writes (read-only or unable to persist)"
    body = ErrorBody(status_code=507 if full else 503, detail=f"the queue store (Redis) {why}; try again later")
    return _respond(body, headers={"Retry-After": str(retry_after)}, path=request.url.path)


def request_id(request: Request[Any, Any, Any]) -> str:
    """The caller's X-Request-ID when it is a plain token, else a fresh one: what a 500 and its log line share."""
    given = request.headers.get(REQUEST_ID_HEADER, "")
    return given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex


def internal_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """Anything no other handler answers: logged with its traceback and a request id, which the 500 carries (body
    and X-Request-ID), so an operator finds the one from the other. The body says nothing else about the fault."""
    rid = request_id(request)
    log.error(
        "unhandled %s on %s %s [request %s]", type(exc).__name__, request.method, request.url.path, rid, exc_info=exc
    )
    body = ErrorBody(status_code=500, detail=f"internal error (request id {rid})", request_id=rid)
    return _respond(body, headers={REQUEST_ID_HEADER: rid}, path=request.url.path)


EXCEPTION_HANDLERS: ExceptionHandlersMap = {
    InputError: input_error,
    PromptError: prompt_error,
    LimitExceeded: limit_exceeded,
    RequestEntityTooLarge: body_too_large,
    IdempotencyConflict: idempotency_conflict,
    ValidationException: validation_failed,
    HTTPException: http_exception,
    RedisConnectionError: redis_down,
    RedisTimeoutError: redis_down,
    **dict.fromkeys(REDIS_REFUSED, store_refused),
    ResponseError: store_refused,  # a refusal another client did not map to a class of its own; else a 500
    Exception: internal_error,
}
