"""Results: stored exactly once per item, read back by cursor (completion order), by position, in input order, or
most uncertain first.

Results are stored by one Lua script that checks the stored-marker, appends, counts and closes the batch in one
step, so a worker that re-runs a chunk (after a crash, or a Redis outage) can never store an item twice. The same
step indexes each result in `batch:{id}:uncertain`, a sorted set scored by `juiz.judging.uncertainty.uncertainty_rank`
whose members are "item index:position in the results list" (the index zero-padded, so ties keep input order):
a page of the most-uncertain-first order is one script (`UNCERTAIN_PAGE`: a ZRANGE and one LINDEX per result, in
Redis), never the whole batch.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

from redis import Redis

from juiz.judging.uncertainty import uncertainty_rank
from juiz.runtime.settings import Settings
from juiz.store.annotations import Annotations
from juiz.store.batches import RETAIN_LUA, BatchRecord, script_keys
from juiz.store.keys import batch_key, text
from juiz.store.metrics import Metrics
from schemas import Judgement

# KEYS: the batch's `script_keys`. ARGV: now, retention_s, then (index, status, entry, uncertainty rank) 4-tuples.
# Returns the indices newly stored; -1 when the batch was cancelled, -2 when there is no such batch.
_STORE_RESULTS = (
    RETAIN_LUA
    + """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return -2 end
if status == 'cancelled' then return -1 end
local stored = {}
for i = 3, #ARGV, 4 do
  if redis.call('HSETNX', KEYS[2], ARGV[i], 1) == 1 then
    local position = redis.call('RPUSH', KEYS[3], ARGV[i + 2]) - 1
    redis.call('ZADD', KEYS[8], ARGV[i + 3], string.format('%010d:%d', tonumber(ARGV[i]), position))
    redis.call('HINCRBY', KEYS[1], ARGV[i + 1], 1)
    stored[#stored + 1] = ARGV[i]
  end
end
if #stored == 0 then return stored end
-- progress event: /v1/grade and NDJSON followers block on this stream instead of polling
redis.call('XADD', KEYS[9], 'MAXLEN', '~', 64, '*', 'stored', #stored)
redis.call('EXPIRE', KEYS[9], 86400)
local done = redis.call('HINCRBY', KEYS[1], 'done', #stored)
redis.call('HSET', KEYS[1], 'updated_at', ARGV[1])
if status == 'queued' then
  redis.call('HSET', KEYS[1], 'status', 'running')
  redis.call('HSETNX', KEYS[1], 'started_at', ARGV[1])
end
if done >= tonumber(redis.call('HGET', KEYS[1], 'total')) then
  local ok = tonumber(redis.call('HGET', KEYS[1], 'ok') or '0')
  local graded = ok + tonumber(redis.call('HGET', KEYS[1], 'parse_error') or '0')
  redis.call('HSET', KEYS[1], 'status', graded > 0 and 'done' or 'failed', 'finished_at', ARGV[1])
  retain(ARGV[1], ARGV[2])
end
return stored
"""
)

# One page of the most-uncertain-first order, as stored: KEYS `uncertain_page_keys`, ARGV first and last rank.
# Returns {tenant, status, results stored, ranks read, {entry, ...}} (one round trip, one slot: the batch's keys).
# The API serves it on the event loop without parsing a result (service.controllers.batches).
UNCERTAIN_PAGE = """
local b = redis.call('HMGET', KEYS[1], 'tenant', 'status')
local members = redis.call('ZRANGE', KEYS[2], ARGV[1], ARGV[2])
local entries = {}
for _, m in ipairs(members) do
  local entry = redis.call('LINDEX', KEYS[3], tonumber(string.match(m, ':(%d+)$')))
  if entry then entries[#entries + 1] = entry end
end
return {b[1] or false, b[2] or false, redis.call('LLEN', KEYS[3]), #members, entries}
"""


def uncertain_page_keys(batch_id: str) -> list[str]:
    return [batch_key(batch_id), batch_key(batch_id, "uncertain"), batch_key(batch_id, "results")]


class Results:
    def __init__(self, redis: Redis, settings: Settings, metrics: Metrics) -> None:
        self.redis = redis
        self.settings = settings
        self.metrics = metrics
        self._store = redis.register_script(_STORE_RESULTS)
        self._uncertain_page = redis.register_script(UNCERTAIN_PAGE)
        self.annotations = Annotations(redis)

    def store(self, batch: BatchRecord, results: Sequence[tuple[int, Judgement]]) -> list[int]:
        """Store results not stored before, each carrying the labels its triple already has (`Annotations.attach`);
        returns the indices stored now (none when the batch was cancelled)."""
        if not results:
            return []
        results = self.annotations.attach(batch.tenant, batch.id, results, batch.options.label_mapping)
        now = time.time()
        args: list[str | int] = [repr(now), self.settings.retention_s]
        for index, judgement in results:
            entry = f"{index}\n{judgement.model_dump_json()}"
            args += [str(index), judgement.status.value, entry, repr(uncertainty_rank(judgement))]
        outcome = self._store(keys=script_keys(batch.id), args=args)
        if not isinstance(outcome, list):
            return []
        stored = [int(i) for i in outcome]
        if stored:
            # Counted after the script, not in it: the counters are global keys, and a script keeps to one batch's.
            status_of = {index: judgement.status.value for index, judgement in results}
            self.metrics.record_items(now - batch.created_at, Counter(status_of[i] for i in stored), now)
        return stored

    def count(self, batch_id: str) -> int:
        return int(self.redis.llen(batch_key(batch_id, "results")))

    def read_raw(self, batch_id: str, offset: int, limit: int) -> list[str]:
        """Judgement JSON strings in completion order, from `offset`: the cursor of the results endpoint."""
        if limit <= 0:
            return []
        entries = self.redis.lrange(batch_key(batch_id, "results"), offset, offset + limit - 1)
        return [text(entry).partition("\n")[2] for entry in entries]

    def read(self, batch_id: str, offset: int, limit: int) -> list[Judgement]:
        return [Judgement.model_validate_json(raw) for raw in self.read_raw(batch_id, offset, limit)]

    def in_input_order(self, batch_id: str) -> list[Judgement]:
        """Every stored result, ordered as the items were submitted (for reports and agreement)."""
        entries = self.redis.lrange(batch_key(batch_id, "results"), 0, -1)
        indexed = []
        for entry in entries:
            index, _, raw = text(entry).partition("\n")
            indexed.append((int(index), raw))
        indexed.sort(key=lambda pair: pair[0])
        return [Judgement.model_validate_json(raw) for _, raw in indexed]

    def entries(self, batch_id: str, offset: int, limit: int) -> list[tuple[int, int, str]]:
        """(position in the results list, item index, judgement JSON) from `offset` on, in completion order."""
        entries = self.redis.lrange(batch_key(batch_id, "results"), offset, offset + limit - 1)
        out = []
        for position, entry in enumerate(entries, start=offset):
            index, _, raw = text(entry).partition("\n")
            out.append((position, int(index), raw))
        return out

    def at(self, batch_id: str, positions: Sequence[int]) -> list[Judgement | None]:
        """The judgements at these positions of the results list (one round trip): what one page of a table shows."""
        with self.redis.pipeline(transaction=False) as pipe:
            for position in positions:
                pipe.lindex(batch_key(batch_id, "results"), position)
            entries = pipe.execute()
        return [
            None if entry is None else Judgement.model_validate_json(text(entry).partition("\n")[2])
            for entry in entries
        ]

    def uncertain_first(self, batch_id: str, offset: int, limit: int) -> list[Judgement]:
        """A page of the results stored so far, most uncertain first (`juiz.judging.uncertainty.uncertain_first`'s
        order), read from the index: `limit` results in memory, whatever the batch's size."""
        if limit <= 0:
            return []
        reply = self._uncertain_page(keys=uncertain_page_keys(batch_id), args=[offset, offset + limit - 1])
        return [Judgement.model_validate_json(text(entry).partition("\n")[2]) for entry in reply[4]]
