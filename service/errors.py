"""Every error the API answers, mapped to HTTP in this one place. Bodies are `schemas.ErrorBody` and name the field.

juiz.runtime.errors.InputError        422  field, and the item's index (JSON body) or line (JSONL upload)
juiz.runtime.errors.PromptError       422  field options.prompt
LimitExceeded                 413  limit max_items, with the maximum
RequestEntityTooLarge         413  limit max_body_bytes (Litestar stops reading the body there)
juiz.runtime.errors.IdempotencyConflict 409 field Idempotency-Key
ValidationException (Litestar) 422 a typed body, path or query parameter Litestar refused (its default is 400)
HTTPException (Litestar)      its own status (401, 404 …), field when known
redis ConnectionError         503  Redis is unreachable
"""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.types import ExceptionHandlersMap
from pydantic import ValidationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from juiz.runtime.errors import IdempotencyConflict, InputError, JuizError, PromptError
from schemas import ErrorBody
from service.edge import baseline_headers

log = logging.getLogger(__name__)

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
}
