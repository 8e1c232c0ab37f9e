"""The Redis data layer the API and the workers share, one module per noun, each with its keys and scripts:

    keys      the key layout (every key named in one place) and `text`, which reads replies
    batches   the batch record, creation (items, chunk jobs, idempotency keys), status, cancel, the tenant's list
    items     the triples as submitted: a chunk's items still to grade, one item, a search by id
    chunks    `pending`, each chunk's one owner, claim (coalescing, fair shares), release, finish
    queues    RQ's side, through RQ's public API only: one job per chunk, taken off its queue when claimed by another
              job or cancelled; the workers alive for a queue (what claim's fair share is split between)
    results   stored exactly once per item; read by cursor, by position, in input order
    labels    manual labels set in place, and the batch's labels_version
    annotations  the team's labels per triple (one per annotator, kept across runs), the queue's leases
    cache     the result cache
    metrics   counters and histograms for /metrics
    progress  conversations planned and done within engine calls, per chunk in flight (fields of the batch's hash)
    ratelimit per-caller request counts per minute (the API's rate limit, the page's sign-in)
    pages     the web page's own state: label queues, a fitted calibration, a tenant's saved one
    reads     the API's hot reads on its event loop (asyncio client): polls, raw result pages, progress waits
    orphans   what `juiz admin gc` finds: keys and index entries whose batch is gone, batches over without a TTL

`Store` is the facade the API and the workers hold: it builds the nouns on one connection, and keeps the names its
callers used before the split (`store.create_batch(...)` is `store.batches.create(...)`). New code may call either.

No script reads or writes an RQ key (tests/integration/test_key_slots.py checks the keys of every call).
Redis Cluster: which scripts stay in one slot and what does not yet is in `keys`, beside the layout.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from rq import Queue

from juiz.runtime.errors import IdempotencyConflict
from juiz.runtime.settings import Settings
from juiz.store import keys
from juiz.store.annotations import Annotations
from juiz.store.batches import COUNT_FIELDS, TERMINAL, Batches, BatchRecord, batch_from_hash
from juiz.store.cache import ResultCache
from juiz.store.chunks import ChunkRef, Chunks, Claim
from juiz.store.items import Items
from juiz.store.keys import PREFIX, text
from juiz.store.labels import Labels
from juiz.store.metrics import ENGINE_CALL_BUCKETS, ITEM_BUCKETS, RATE_WINDOW_S, Metrics
from juiz.store.pages import PageState
from juiz.store.progress import BatchProgress, ChunkProgress, ProgressWrites
from juiz.store.queues import ChunkJobs, JuizQueue
from juiz.store.ratelimit import RateCounts
from juiz.store.reads import AsyncReads
from juiz.store.results import Results
from schemas import BatchOptions, Judgement, Triple
from schemas.triple import Label

__all__ = [
    "COUNT_FIELDS",
    "ENGINE_CALL_BUCKETS",
    "ITEM_BUCKETS",
    "PREFIX",
    "RATE_WINDOW_S",
    "TERMINAL",
    "BatchProgress",
    "BatchRecord",
    "ChunkProgress",
    "ChunkRef",
    "Claim",
    "IdempotencyConflict",
    "JuizQueue",
    "Store",
    "batch_from_hash",
    "text",
]


class Store:
    """Everything juiz keeps in Redis. Thread-safe as far as the Redis client is (redis-py's is)."""

    # the key layout, for callers that read a key themselves (the API's async reads, the sweeper)
    batch_key = staticmethod(keys.batch_key)
    pending_key = staticmethod(keys.pending_key)
    active_key = staticmethod(keys.active_key)
    tenant_batches_key = staticmethod(keys.tenant_batches_key)

    def __init__(self, redis: Redis, settings: Settings, async_redis: AsyncRedis | None = None) -> None:
        self.redis = redis
        self.settings = settings
        self.metrics = Metrics(redis)
        self.jobs = ChunkJobs(redis, settings)
        self.chunks = Chunks(redis, settings, self.jobs)
        self.cache = ResultCache(redis, settings.result_cache_ttl_s)
        self.batches = Batches(redis, settings, self.chunks, self.jobs, self.metrics, self.cache)
        self.items = Items(redis)
        self.progress = ProgressWrites(redis)
        self.results = Results(redis, settings, self.metrics)
        self.labels = Labels(redis)
        self.annotations: Annotations = self.results.annotations
        self.rates = RateCounts(redis, async_redis)
        self.pages = PageState(redis)
        self._reads = None if async_redis is None else AsyncReads(async_redis)

    @property
    def reads(self) -> AsyncReads:
        """The API's event-loop reads (juiz.store.reads); only a store built with the asyncio client has them."""
        if self._reads is None:
            raise RuntimeError("this store has no asyncio client: its async reads are the API's")
        return self._reads

    def ping(self) -> None:
        self.redis.ping()

    def check_writable(self) -> None:
        """Raise what Redis answers a small write with: OutOfMemoryError, ReadOnlyError, StoreMisconfigured (a
        refusal, juiz.runtime.retry.REDIS_REFUSED) or a connection error. A PING answers while writes are refused."""
        self.redis.set(keys.WRITE_PROBE_KEY, b"1", px=10_000)

    def rq_queue(self, name: str) -> Queue:
        return self.jobs.rq_queue(name)

    # --- batches ----------------------------------------------------------------------------------------------

    def create_batch(
        self,
        tenant: str,
        options: BatchOptions,
        items: Sequence[Triple],
        *,
        priority: bool = False,
        idempotency_key: str | None = None,
        fingerprint: str = "",
        name: str | None = None,
    ) -> tuple[BatchRecord, bool]:
        return self.batches.create(
            tenant,
            options,
            items,
            priority=priority,
            idempotency_key=idempotency_key,
            fingerprint=fingerprint,
            name=name,
        )

    def get_batch(self, batch_id: str) -> BatchRecord | None:
        return self.batches.get(batch_id)

    def mark_running(self, batch_id: str) -> None:
        self.batches.mark_running(batch_id)

    def cancel_batch(self, batch: BatchRecord) -> BatchRecord:
        return self.batches.cancel(batch)

    def cancelled_batches(self, batch_ids: Iterable[str]) -> set[str]:
        return self.batches.cancelled(batch_ids)

    def list_batches(self, tenant: str, offset: int, limit: int) -> tuple[list[BatchRecord], int]:
        return self.batches.page(tenant, offset, limit)

    def set_batch_name(self, batch_id: str, name: str) -> None:
        self.batches.set_name(batch_id, name)

    def purge_batch(self, batch: BatchRecord) -> int:
        return self.batches.purge(batch)

    # --- items and chunks -------------------------------------------------------------------------------------

    def chunk_items(self, batch: BatchRecord, chunk_no: int) -> list[tuple[int, Triple]]:
        return self.items.of_chunk(batch, chunk_no)

    def item_at(self, batch_id: str, index: int) -> Triple | None:
        return self.items.at(batch_id, index)

    def find_item_index(self, batch_id: str, item_id: str) -> int | None:
        return self.items.find(batch_id, item_id)

    def claim(
        self,
        queue: str,
        job_id: str,
        worker_key: str,
        *,
        own: ChunkRef | None,
        budget: int | None = None,
        have: int = 0,
    ) -> Claim | None:
        return self.chunks.claim(queue, job_id, worker_key, own=own, budget=budget, have=have)

    def release(self, queue: str, job_id: str, chunks: Sequence[ChunkRef], *, requeue: bool = True) -> list[ChunkRef]:
        return self.chunks.release(queue, job_id, chunks, requeue=requeue)

    def finish(self, job_id: str, worker_key: str, chunks: Sequence[ChunkRef]) -> None:
        self.chunks.finish(job_id, worker_key, chunks)

    def owned(self, job_id: str) -> list[ChunkRef]:
        return self.chunks.owned(job_id)

    def still_grading(self, worker_key: str, ttl_s: int) -> None:
        self.chunks.still_grading(worker_key, ttl_s)

    def drop_pending(self, queue: str, chunks: Iterable[ChunkRef]) -> None:
        self.chunks.drop_pending(queue, chunks)

    def count_abandoned(self, chunks: Sequence[ChunkRef]) -> list[int]:
        return self.chunks.count_abandoned(chunks)

    def chunk_events_cursor(self, queue: str) -> str:
        return self.chunks.chunk_events_cursor(queue)

    def wait_for_chunks(self, queue: str, cursor: str, timeout_s: float) -> str:
        return self.chunks.wait_for_chunks(queue, cursor, timeout_s)

    def last_batch_at(self, queue: str) -> float:
        return self.chunks.last_batch_at(queue)

    def pending_chunk_count(self, queue: str) -> int:
        return self.chunks.pending_count(queue)

    # --- results and labels -----------------------------------------------------------------------------------

    def write_progress(self, by_batch: dict[str, dict[int, ChunkProgress]]) -> None:
        self.progress.write(by_batch)

    def fold_progress(self, by_batch: dict[str, list[int]]) -> None:
        self.progress.fold(by_batch)

    def store_results(self, batch: BatchRecord, results: Sequence[tuple[int, Judgement]]) -> list[int]:
        return self.results.store(batch, results)

    def result_count(self, batch_id: str) -> int:
        return self.results.count(batch_id)

    def read_results_raw(self, batch_id: str, offset: int, limit: int) -> list[str]:
        return self.results.read_raw(batch_id, offset, limit)

    def read_results(self, batch_id: str, offset: int, limit: int) -> list[Judgement]:
        return self.results.read(batch_id, offset, limit)

    def results_in_input_order(self, batch_id: str) -> list[Judgement]:
        return self.results.in_input_order(batch_id)

    def results_uncertain_first(self, batch_id: str, offset: int, limit: int) -> list[Judgement]:
        return self.results.uncertain_first(batch_id, offset, limit)

    def result_entries(self, batch_id: str, offset: int, limit: int) -> list[tuple[int, int, str]]:
        return self.results.entries(batch_id, offset, limit)

    def results_at(self, batch_id: str, positions: Sequence[int]) -> list[Judgement | None]:
        return self.results.at(batch_id, positions)

    def labels_version(self, batch_id: str) -> int:
        return self.labels.version(batch_id)

    def set_manual_label(
        self, batch_id: str, position: int, label: Label | None, by: str, at: float
    ) -> tuple[Judgement, int]:
        return self.labels.set(batch_id, position, label, by, at)

    # --- cache and metrics ------------------------------------------------------------------------------------

    def cache_get(self, digests: Sequence[str]) -> list[dict[str, Any] | None]:
        return self.cache.get(digests)

    def cache_put(self, entries: dict[str, dict[str, Any]]) -> None:
        self.cache.put(entries)

    def record_engine_call(self, seconds: float, items: int) -> None:
        self.metrics.record_engine_call(seconds, items)

    def record_cache_hits(self, hits: int) -> None:
        self.metrics.record_cache_hits(hits)

    def counters(self) -> dict[str, int]:
        return self.metrics.counters()

    def histogram(self, name: str, buckets: Sequence[float]) -> tuple[list[tuple[str, int]], float, int]:
        return self.metrics.histogram(name, buckets)

    def judgements_per_second(self) -> float:
        return self.metrics.judgements_per_second()
