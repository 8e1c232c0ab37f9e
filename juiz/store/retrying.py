"""The store as the workers hold it: every call retried while Redis is away or refuses writes.

`retrying(store, within_s)` looks and types like the `Store` it wraps; each method call (the facade's, or a noun's:
`store.cache.remember(...)`) is retried with backoff for up to `within_s` by `juiz.runtime.retry.while_redis_away`,
which decides in one place what is worth waiting for. Every store step a job takes is idempotent (see workers.jobs),
so a retry after a lost reply is harmless. Attributes that are not calls (settings, the connection) come through as
they are.
"""

from __future__ import annotations

import functools
from typing import Any, cast

from juiz.runtime.retry import while_redis_away
from juiz.store import Store


class _Retrying:
    def __init__(self, target: Any, within_s: float) -> None:
        self._target = target
        self._within_s = within_s

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if callable(value):

            @functools.wraps(value)
            def retried(*args: Any, **kwargs: Any) -> Any:
                return while_redis_away(self._within_s, lambda: value(*args, **kwargs))

            return retried
        if type(value).__module__.startswith(__package__ or "juiz.store"):  # a noun of the store: its calls too
            return _Retrying(value, self._within_s)
        return value


def retrying(store: Store, within_s: float) -> Store:
    """`store` with each call retried for up to `within_s` while Redis is away or refuses writes."""
    return cast(Store, _Retrying(store, within_s))
