"""What `juiz admin gc` finds and removes: what a batch left behind once it was gone, and batches that would never go.

    index entries   a tenant's list, `active` or a queue's pending-batches naming a batch whose record is gone
                    (expired with the retention, or purged): pruned as they are read too, this catches the unread
    orphan keys     keys of a batch (`batch:{id}:*`) whose record is gone: written after it expired, or left by a
                    fault between steps
    unexpiring      batches over (done, failed, cancelled) whose keys have no TTL although retention is set: given
                    the retention from now

Reads the whole key space with SCAN (a pass over every key: an operator's command, not a request's work).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from redis import Redis

from juiz.runtime.settings import Settings
from juiz.store.batches import TERMINAL, batch_from_hash, script_keys
from juiz.store.keys import PREFIX, active_key, batch_key, text

_BATCH = re.compile(rf"^{PREFIX}:batch:\{{([^}}]+)\}}(:.*)?$")
_INDEXES = (f"{PREFIX}:tenant:*:batches", f"{PREFIX}:pending-batches:*")


@dataclass
class Findings:
    index_entries: int = 0
    orphan_keys: int = 0
    unexpiring: int = 0
    removed: bool = False
    examples: list[str] = field(default_factory=list)  # a few of the keys found, for the report

    def lines(self) -> list[str]:
        verb = "removed" if self.removed else "found"
        return [
            f"index entries of gone batches: {self.index_entries} {verb}",
            f"keys of gone batches: {self.orphan_keys} {verb}",
            f"batches over without a TTL: {self.unexpiring} {'given one' if self.removed else 'found'}",
            *(f"  e.g. {key}" for key in self.examples[:10]),
        ]


def collect(redis: Redis, settings: Settings, *, remove: bool) -> Findings:
    """One pass over the key space; with `remove`, prune, delete and expire what it finds."""
    findings = Findings(removed=remove)
    parts: dict[str, list[str]] = {}
    for raw in redis.scan_iter(match=f"{PREFIX}:batch:*", count=1000):
        key = text(raw)
        match = _BATCH.match(key)
        if match:
            parts.setdefault(match.group(1), []).append(key)
    alive = _alive(redis, list(parts))
    for batch_id, keys in parts.items():
        if batch_id not in alive:
            findings.orphan_keys += len(keys)
            findings.examples += keys[:1]
            if remove:
                redis.delete(*keys)
    for pattern in _INDEXES:
        for raw in redis.scan_iter(match=pattern, count=1000):
            _prune(redis, text(raw), findings, remove)
    _prune(redis, active_key(), findings, remove)
    if settings.retention_s:
        for batch_id in alive:
            record = batch_from_hash(redis.hgetall(batch_key(batch_id)))
            if record is not None and record.status in TERMINAL and redis.ttl(batch_key(batch_id)) == -1:
                findings.unexpiring += 1
                findings.examples.append(batch_key(batch_id))
                if remove:
                    with redis.pipeline(transaction=False) as pipe:
                        for key in script_keys(batch_id):
                            pipe.expire(key, settings.retention_s)
                        pipe.execute()
    return findings


def _alive(redis: Redis, batch_ids: list[str]) -> set[str]:
    with redis.pipeline(transaction=False) as pipe:
        for batch_id in batch_ids:
            pipe.exists(batch_key(batch_id))
        found = pipe.execute()
    return {batch_id for batch_id, n in zip(batch_ids, found, strict=True) if n}


def _prune(redis: Redis, index: str, findings: Findings, remove: bool) -> None:
    ids = [text(i) for i in redis.zrange(index, 0, -1)]
    gone = sorted(set(ids) - _alive(redis, ids))
    findings.index_entries += len(gone)
    if gone:
        findings.examples.append(index)
        if remove:
            redis.zrem(index, *gone)
