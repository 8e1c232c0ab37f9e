"""Retrying transient HTTP faults with tenacity, honouring the server's Retry-After: one policy for juiz's clients
(the judge-server back end in `juiz.openai_engine`, the API clients in `juiz.client`).

An error worth retrying carries `retry_after_s` (the server's Retry-After, or None); the wait is that value when
given (capped), else exponential backoff with jitter.
"""

from __future__ import annotations

import email.utils
import time
from typing import Protocol, runtime_checkable

from tenacity import RetryCallState, wait_exponential_jitter

MAX_RETRY_AFTER_S = 120.0  # a server asking for longer is not waited for longer than this per attempt


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
