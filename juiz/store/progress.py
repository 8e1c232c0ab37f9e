"""A batch's progress within its engine calls: conversations planned and done, items done before their results are
stored. Fields of the batch's hash (so they expire and are purged with it):

    p:<chunk no>    "planned done items_done items_seen open written read work_planned work_done" of a chunk in a
                    call now (written by its worker, at most once a `progress_interval_s`, and once more when the call
                    is over; a value of an older worker lacks the last figures: 0)
    conv_planned, conv_done, conv_items, tok_written, tok_read, work_planned, work_done
                    the sums of the chunks whose results are stored (their p: field folded in, then dropped, so the
                    hash holds a field per chunk in flight, not per chunk of the batch)

Each write adds an entry to the batch's events stream, which the API's event stream and followers block on. A write
for a batch that is gone (purged) or over writes nothing: it would bring back a hash of stray fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from redis import Redis

from juiz.store.keys import batch_key

CHUNK_PREFIX = "p:"
FOLDED = ("conv_planned", "conv_done", "conv_items", "tok_written", "tok_read", "work_planned", "work_done")

# KEYS: batch, events. ARGV: field, value, field, value, ...
_WRITE = """
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'queued' and status ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
redis.call('XADD', KEYS[2], 'MAXLEN', '~', 64, '*', 'progress', 1)
redis.call('EXPIRE', KEYS[2], 86400)
return 1
"""

# KEYS: batch, events. ARGV: the p: fields of chunks whose results are stored. A field already folded is gone, so a
# retried fold adds nothing twice.
_FOLD = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local folded = 0
for _, field in ipairs(ARGV) do
  local value = redis.call('HGET', KEYS[1], field)
  if value then
    local n = {}
    for part in string.gmatch(value, '%d+') do n[#n + 1] = tonumber(part) end
    redis.call('HINCRBY', KEYS[1], 'conv_planned', n[1])
    redis.call('HINCRBY', KEYS[1], 'conv_done', n[2])
    redis.call('HINCRBY', KEYS[1], 'conv_items', n[4])
    if n[6] then redis.call('HINCRBY', KEYS[1], 'tok_written', n[6]) end
    if n[7] then redis.call('HINCRBY', KEYS[1], 'tok_read', n[7]) end
    if n[8] then redis.call('HINCRBY', KEYS[1], 'work_planned', n[8]) end
    if n[9] then redis.call('HINCRBY', KEYS[1], 'work_done', n[9]) end
    redis.call('HDEL', KEYS[1], field)
    folded = folded + 1
  end
end
if folded > 0 then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', 64, '*', 'progress', 1)
  redis.call('EXPIRE', KEYS[2], 86400)
end
return folded
"""


@dataclass(frozen=True)
class ChunkProgress:
    """One chunk's part of an engine call."""

    planned: int  # its conversations planned so far
    done: int
    items_done: int  # its items graded (or needing no engine: cached, failed) but not stored yet
    items_seen: int  # its items in the call
    open: bool  # some of its items' conversations are still to be planned
    written: int = 0  # reply tokens written in its items' conversations so far
    read: int = 0  # prompt tokens computed for them so far
    work_planned: int = 0  # its conversations' estimated work (juiz.judging.progress.WorkEstimate), for the ETA
    work_done: int = 0

    def encode(self) -> str:
        figures = (
            *(self.planned, self.done, self.items_done, self.items_seen, int(self.open)),
            *(self.written, self.read, self.work_planned, self.work_done),
        )
        return " ".join(map(str, figures))

    @classmethod
    def decode(cls, value: str) -> ChunkProgress:
        planned, done, items_done, seen, still_open, *later = (int(part) for part in value.split())
        written, read, work_planned, work_done = (*later, 0, 0, 0, 0)[:4]
        return cls(planned, done, items_done, seen, bool(still_open), written, read, work_planned, work_done)


@dataclass(frozen=True)
class BatchProgress:
    """A batch's conversations and items as the workers last wrote them (`from_fields` of its hash)."""

    planned: int = 0
    done: int = 0
    items_seen: int = 0  # items that reached an engine call (or were settled without one), stored or not
    items_in_flight_done: int = 0  # items graded in calls whose results are not stored yet
    open: bool = False  # a chunk in flight has conversations still to plan
    written: int = 0  # reply tokens written so far
    read: int = 0  # prompt tokens computed so far
    work_planned: int = 0  # the conversations' estimated work, for the ETA
    work_done: int = 0

    @property
    def reported(self) -> bool:
        return self.items_seen > 0

    @classmethod
    def from_fields(cls, data: Mapping[str, str]) -> BatchProgress:
        chunks = [ChunkProgress.decode(v) for k, v in data.items() if k.startswith(CHUNK_PREFIX)]
        return cls(
            planned=int(data.get("conv_planned", 0)) + sum(c.planned for c in chunks),
            done=int(data.get("conv_done", 0)) + sum(c.done for c in chunks),
            items_seen=int(data.get("conv_items", 0)) + sum(c.items_seen for c in chunks),
            items_in_flight_done=sum(c.items_done for c in chunks),
            open=any(c.open for c in chunks),
            written=int(data.get("tok_written", 0)) + sum(c.written for c in chunks),
            read=int(data.get("tok_read", 0)) + sum(c.read for c in chunks),
            work_planned=int(data.get("work_planned", 0)) + sum(c.work_planned for c in chunks),
            work_done=int(data.get("work_done", 0)) + sum(c.work_done for c in chunks),
        )


class ProgressWrites:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._write = redis.register_script(_WRITE)
        self._fold = redis.register_script(_FOLD)

    def write(self, by_batch: Mapping[str, Mapping[int, ChunkProgress]]) -> None:
        """Each chunk's figures now, batch by batch, in one round trip."""
        with self.redis.pipeline(transaction=False) as pipe:
            for batch_id, chunks in by_batch.items():
                fields = [part for n, c in chunks.items() for part in (f"{CHUNK_PREFIX}{n}", c.encode())]
                if fields:
                    self._write(keys=_keys(batch_id), args=fields, client=pipe)
            pipe.execute()

    def fold(self, by_batch: Mapping[str, list[int]]) -> None:
        """The chunks whose results are stored: their figures into the batch's sums, their fields dropped."""
        with self.redis.pipeline(transaction=False) as pipe:
            for batch_id, chunk_nos in by_batch.items():
                if chunk_nos:
                    self._fold(keys=_keys(batch_id), args=[f"{CHUNK_PREFIX}{n}" for n in chunk_nos], client=pipe)
            pipe.execute()


def _keys(batch_id: str) -> list[str]:
    return [batch_key(batch_id), batch_key(batch_id, "events")]
