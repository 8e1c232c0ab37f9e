"""Retrying transient faults with tenacity: one policy for each kind of fault.

HTTP (the judge-server back end in `juiz.engines.openai_server`, the API clients in `juiz.clients.http`), honouring the
server's Retry-After. Redis faults where waiting helps, decided here for every caller (`REDIS_ERRORS`):

    REDIS_AWAY      ConnectionError, TimeoutError            a restart, a dropped connection
    REDIS_REFUSED   OutOfMemoryError (OOM, maxmemory with noeviction), ReadOnlyError (READONLY: a replica, a
                    failover in progress), StoreMisconfigured (MISCONF: Redis can't persist, so it refuses writes)

Under a worker, `while_redis_away` retries a read or a state change with exponential backoff for a bounded time
(`JUIZ_REDIS_RETRY_S`), and the worker's own loop waits for as long as it takes; the API answers a refusal with 507
and Retry-After (service.errors), Redis away with 503.

An error worth retrying carries `retry_after_s` (the server's Retry-After, or None); the wait is that value when
given (capped), else exponential backoff with jitter.
"""

from __future__ import annotations

import email.utils
import logging
import time
from collections.abc import Callable
from typing import Protocol, TypeVar, runtime_checkable

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError, ReadOnlyError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from tenacity import (
    RetryCallState,
    Retrying,
    before_sleep_log,
    retry_if_exception,
    stop_after_delay,
    wait_exponential,
    wait_exponential_jitter,
)

log = logging.getLogger(__name__)

MAX_RETRY_AFTER_S = 120.0  # a server asking for longer is not waited for longer than this per attempt


class StoreMisconfigured(ResponseError):
    """MISCONF: Redis could not save its snapshot (`stop-writes-on-bgsave-error`) and refuses writes until it can.
    redis-py has no class of its own for it; juiz's clients map it (juiz.store.connection)."""


# Redis away, not a bad command: the faults a restart (or a dropped connection) raises.
REDIS_AWAY = (RedisConnectionError, RedisTimeoutError)
# Redis up but refusing writes: full (noeviction), a read-only replica, a failed snapshot. Reads still work.
REDIS_REFUSED = (OutOfMemoryError, ReadOnlyError, StoreMisconfigured)
# Every Redis fault that waiting can cure: what workers wait out and never exit for.
REDIS_ERRORS = REDIS_AWAY + REDIS_REFUSED
REFUSAL_CODES = frozenset({"OOM", "READONLY", "MISCONF"})
T = TypeVar("T")


@runtime_checkable
class SaysWhenToRetry(Protocol):
    """An error that knows what the server's Retry-After said."""

    @property
    def retry_after_s(self) -> float | None: ...


def retry_after_s(value: str | None) -> float | None:
    """Retry-After as seconds (RFC 9110: delay-seconds or an HTTP date); None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class WaitRetryAfter:
    """tenacity wait: the server's Retry-After when it gave one, else exponential backoff with jitter."""

    def __init__(self, initial_s: float = 0.5, max_s: float = 30.0, max_retry_after_s: float = MAX_RETRY_AFTER_S):
        self._fallback = wait_exponential_jitter(multiplier=initial_s, max=max_s)
        self._cap = max_retry_after_s

    def __call__(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, SaysWhenToRetry) and exc.retry_after_s is not None:
            return min(exc.retry_after_s, self._cap)
        return float(self._fallback(state))


def write_refused(exc: BaseException) -> bool:
    """Redis refused a write (full, read-only, can't persist), whichever client raised it: juiz's map the reply to
    a class; another client's (a test's, RQ's own) leaves a ResponseError carrying the reply's code."""
    if isinstance(exc, REDIS_REFUSED):
        return True
    if not isinstance(exc, ResponseError):
        return False
    code = getattr(exc, "status_code", None) or str(exc).split(" ", 1)[0]
    return code in REFUSAL_CODES


def waiting_helps(exc: BaseException) -> bool:
    """Redis away or refusing writes: a fault a later attempt may not meet."""
    return isinstance(exc, REDIS_AWAY) or write_refused(exc)


def while_redis_away(within_s: float, call: Callable[[], T]) -> T:
    """`call` (a Redis read or write) retried with exponential backoff while Redis is away or refuses writes, for up
    to `within_s`; then, or for any other error, the error propagates."""
    for attempt in Retrying(
        retry=retry_if_exception(waiting_helps),
        wait=wait_exponential(multiplier=0.2, max=5),
        stop=stop_after_delay(within_s),
        before_sleep=before_sleep_log(log, logging.WARNING),
        reraise=True,
    ):
        with attempt:
            return call()
    raise AssertionError("unreachable: tenacity re-raises the last error")
