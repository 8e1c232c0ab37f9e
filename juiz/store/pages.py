"""The web page's own state in Redis: a reader's label queue, a calibration fitted and waiting for its second click
(both per session, the session id hashed into the key), the calibration a tenant saved; and dropping a batch's
cached agreement reports when a label changes them. Values are the page's JSON, kept as it is."""

from __future__ import annotations

import hashlib

from redis import Redis

from juiz.store.keys import PREFIX, batch_key

FITTED_TTL_S = 3600  # a fitted calibration waits this long for "save"


def _session(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def queue_key(session_id: str, queue_id: str) -> str:
    return f"{PREFIX}:ui:queue:{_session(session_id)}:{queue_id}"


def fitted_key(session_id: str) -> str:
    return f"{PREFIX}:ui:fitted:{_session(session_id)}"


def saved_calibration_key(tenant: str) -> str:
    return f"{PREFIX}:ui:calibration:{tenant}"


class PageState:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    def save_queue(self, session_id: str, queue_id: str, data: str, ttl_s: int) -> None:
        self.redis.set(queue_key(session_id, queue_id), data, ex=ttl_s)

    def load_queue(self, session_id: str, queue_id: str) -> bytes | None:
        return self.redis.get(queue_key(session_id, queue_id))  # type: ignore[return-value]

    def keep_fitted(self, session_id: str, spec: str) -> None:
        self.redis.set(fitted_key(session_id), spec, ex=FITTED_TTL_S)

    def fitted(self, session_id: str) -> bytes | None:
        return self.redis.get(fitted_key(session_id))  # type: ignore[return-value]

    def save_calibration(self, tenant: str, spec: bytes | str) -> None:
        self.redis.set(saved_calibration_key(tenant), spec)

    def saved_calibration(self, tenant: str) -> bytes | None:
        return self.redis.get(saved_calibration_key(tenant))  # type: ignore[return-value]

    def drop_agreement_reports(self, batch_id: str) -> None:
        """The agreement reports the API cached for the batch (service.agreement keys them per resample count)."""
        stale = list(self.redis.scan_iter(match=batch_key(batch_id, "agreement:*"), count=1000))
        if stale:
            self.redis.delete(*stale)
