"""Manual labels: a reader's label set on a stored result in place, and the batch's labels_version that tells caches
of rows and agreement they are stale."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from redis import Redis

from juiz.store.keys import batch_key, text
from schemas import Judgement
from schemas.triple import Label

# A manual-label change: replace one results entry if it is still what the caller read, and bump labels_version.
# KEYS: batch, results. ARGV: position, entry read, new entry. Returns the new labels_version (≥ 1) when replaced,
# 0 when the entry had changed.
_SET_LABEL = """
if redis.call('LINDEX', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('LSET', KEYS[2], ARGV[1], ARGV[3])
return redis.call('HINCRBY', KEYS[1], 'labels_version', 1)
"""


class Labels:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._set = redis.register_script(_SET_LABEL)

    def version(self, batch_id: str) -> int:
        """Bumped by every manual-label change, so caches of rows and agreement know they are stale."""
        return int(self.redis.hget(batch_key(batch_id), "labels_version") or 0)

    def set(self, batch_id: str, position: int, label: Label | None, by: str, at: float) -> tuple[Judgement, int]:
        """Set (or clear, with None) the manual label of the graded item at `position` of the results list, recording
        who and when as `manual_label_by` / `manual_label_at`. Results, agreement, reports and exports all read it.

        The entry is replaced by compare-and-set (one Lua step, retried when a concurrent change came first) and the
        batch's labels_version is bumped. Returns the updated judgement and the new labels_version. Raises KeyError
        when there is no result at `position`.
        """
        stamp = datetime.fromtimestamp(at, UTC).isoformat()
        return self.update(
            batch_id,
            position,
            lambda j: j.model_copy(update={"manual_label": label, "manual_label_by": by, "manual_label_at": stamp}),
        )

    def update(self, batch_id: str, position: int, change: Callable[[Judgement], Judgement]) -> tuple[Judgement, int]:
        """Replace the result at `position` by `change(result)` (compare-and-set, retried when a concurrent change came
        first) and bump labels_version. Returns the new result and labels_version; KeyError when there is none."""
        for _ in range(20):
            raw_entry = self.redis.lindex(batch_key(batch_id, "results"), position)
            if raw_entry is None:
                raise KeyError(f"no result at {position} in batch {batch_id}")
            old_entry = text(raw_entry)
            index, _, raw_result = old_entry.partition("\n")
            judgement = change(Judgement.model_validate_json(raw_result))
            new_entry = f"{index}\n{judgement.model_dump_json()}"
            keys = [batch_key(batch_id), batch_key(batch_id, "results")]
            version = int(self._set(keys=keys, args=[position, old_entry, new_entry]))
            if version:
                return judgement, version
        raise RuntimeError(f"manual label at {position} in batch {batch_id}: too many concurrent changes")

    def bump(self, batch_id: str) -> int:
        """Tell caches the labels changed without a result changing (a new consensus rule)."""
        return int(self.redis.hincrby(batch_key(batch_id), "labels_version", 1))
