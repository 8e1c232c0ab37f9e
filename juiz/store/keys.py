"""The key layout: every key juiz keeps in Redis is named here, and Redis replies are read back as text here.

Keys (all under `juiz:`). The part in braces is the key's hash tag: Redis Cluster (or a Valkey cluster) puts keys
with the same tag in one slot, so a script or transaction over one batch's keys, or over one queue's, stays on one
node. Every key of a batch carries `{batch id}`; every key of a queue's scheduling carries `{queue}`.

    batch:{id}            hash    tenant, status, options, total, chunk_size, queue, counts, timestamps, name, progress
    batch:{id}:items      list    the items as Triple JSON, in input order (chunk n = a slice of it)
    batch:{id}:stored     hash    item index → 1, set with HSETNX: an item is stored exactly once
    batch:{id}:results    list    "index\\njudgement JSON", in completion order (cursor = offset into it)
    batch:{id}:jobs       set     the RQ job ids made for the batch, so a cancel can drop the queued ones
    batch:{id}:chunkjobs  hash    chunk no → the id of the RQ job queued for it (what a coalescing job takes out)
    batch:{id}:owner      hash    chunk no → the id of the RQ job grading it now (its one owner)
    batch:{id}:abandoned  hash    chunk no → how many workers died grading it (more than MAX_ABANDONED: failed)
    batch:{id}:events     stream  one entry per results write, progress write or cancel: what /v1/grade and followers
                                  block on
    batch:{id}:agreement:*        the API's cached agreement reports (service.agreement)
    events:{queue}        stream  one entry per batch submitted or chunks given back: what a gathering job blocks on
    last-batch:{queue}    string  when the newest batch of the queue was created (a worker waits for a burst to end)
    pending:{queue}       zset    "batch:chunk" of chunks nobody is grading yet, oldest first: what workers coalesce
    pending-tenants:{queue}        zset  tenants with pending chunks (by their oldest batch): claim's round-robin
    pending-batches:{queue}:t      zset  tenant t's batches with pending chunks, oldest first (pruned by claim)
    owned:job-id          set     "batch:chunk" of the chunks a job took from other jobs (given back if it dies)
    grading:worker-key    string  the job a worker is grading (TTL renewed by its heartbeat): busy workers
    idem:tenant:sha       string  "batch_id fingerprint" for an Idempotency-Key
    tenant:t:batches      zset    the tenant's batch ids by creation time (the web page's list, newest first)
    active                zset    ids of batches not known to be over, by creation time (what juiz.store.sweeper checks)
    cache:sha             string  a reusable result for (question, answer, prompt, prompt sha, model, sampling)
    metrics, hist:*, rate:*       counters and histograms /metrics reads at scrape time
    ui:queue:sha:id, ui:fitted:sha, ui:calibration:t   the web page's state (juiz.store.pages)
    ui:session:*, ui:csrf-secret   the web page's sessions (Litestar's RedisStore) and shared CSRF secret
    ratelimit:who:minute  string  requests counted in a one-minute window (juiz.store.ratelimit)
    writable              string  a short-lived probe: does Redis accept writes (full, read-only, can't persist)?

The layout changed with the hash tags (juiz is pre-1.0): keys written by an earlier version are not read.

Redis Cluster. With those hash tags each script over one batch or one queue stays in one slot: storing results,
cancelling, marking a batch running, setting a label, and the steps of giving chunks back (`release`) and of
finishing a job (`finish`), which are split into single-slot steps, each safe to repeat.
`tests/integration/test_key_slots.py` checks the keys of every script call against a real Redis.
What is NOT cluster-safe yet:

  - `claim` (CROSS_SLOT_SCRIPTS): the scheduler decides in one atomic step across the queue's `pending` and fairness
    index and the candidate batches' hashes and chunk owners, and writes the job's owned set and the worker's busy
    marker; its fair share reads the other workers' busy markers. It touches no RQ key: the workers alive and
    registered for the queue are listed before it, through RQ's API, and passed in. Made single-slot, it would keep in
    the queue's slot what it reads and writes (chunk owners, each batch's size and tenant, owned sets, busy markers).
  - `take_small` (CROSS_SLOT_SCRIPTS): a job taking small batches' chunks to grade first, across the same keys as
    `claim` less the fairness index and the busy markers.
  - the MULTI transactions that create a batch and requeue chunks: they write the batch's, the queue's and RQ's keys
    together so that a crash leaves all or none.
  - RQ itself, whose own pipelines span several slots (rq/rq#1942): a cluster needs another queue beneath juiz.

RQ needs a connection that does not decode responses; this package decodes what it reads itself (`text`).
"""

from __future__ import annotations

from typing import Any

PREFIX = "juiz"
# The scripts whose calls name keys of more than one slot, and why: see above.
CROSS_SLOT_SCRIPTS = frozenset({"claim", "take_small"})
METRICS_KEY = f"{PREFIX}:metrics"
WRITE_PROBE_KEY = f"{PREFIX}:writable"


def text(value: Any) -> str:
    """A Redis reply as text (RQ's connection returns bytes)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def batch_key(batch_id: str, part: str | None = None) -> str:
    return f"{PREFIX}:batch:{{{batch_id}}}" + (f":{part}" if part else "")


def pending_key(queue: str) -> str:
    return f"{PREFIX}:pending:{{{queue}}}"


def last_batch_key(queue: str) -> str:
    return f"{PREFIX}:last-batch:{{{queue}}}"


def pending_tenants_key(queue: str) -> str:
    return f"{PREFIX}:pending-tenants:{{{queue}}}"


def pending_batches_key(queue: str, tenant: str) -> str:
    return f"{PREFIX}:pending-batches:{{{queue}}}:{tenant}"


def queue_events_key(queue: str) -> str:
    return f"{PREFIX}:events:{{{queue}}}"


def active_key() -> str:
    return f"{PREFIX}:active"


def owned_key(job_id: str) -> str:
    return f"{PREFIX}:owned:{job_id}"


def grading_key(worker_key: str) -> str:
    return f"{PREFIX}:grading:{worker_key}"


# The same layout for scripts that name a key they read from another key (claim's candidate batches).
LUA_KEYS = f"""
local function batch_key(id, part) return '{PREFIX}:batch:{{' .. id .. '}}' .. (part and (':' .. part) or '') end
local function pending_batches_key(queue, tenant) return '{PREFIX}:pending-batches:{{' .. queue .. '}}:' .. tenant end
local function grading_key(worker) return '{PREFIX}:grading:' .. worker end
"""


def idem_key(tenant: str, digest: str) -> str:
    return f"{PREFIX}:idem:{tenant}:{digest}"


def tenant_batches_key(tenant: str) -> str:
    """zset of the tenant's batch ids scored by creation time: what the web page lists, newest first."""
    return f"{PREFIX}:tenant:{tenant}:batches"


def cache_key(digest: str) -> str:
    return f"{PREFIX}:cache:{digest}"


def histogram_key(name: str) -> str:
    return f"{PREFIX}:hist:{name}"


def rate_key(second: int) -> str:
    return f"{PREFIX}:rate:{second}"
