"""The RQ job: grade one chunk of a batch, and fill the engine call with other queued chunks.

A job carries only ids (`batch_id`, `chunk_no`, JSON-serialised); everything else is in Redis. It is thin:

    lease the chunk → coalesce other pending chunks (leasing each) → drop items already stored or cached
    → grade the rest in ONE `Judge.grade_many` call → store (exactly once per item) → release the leases

Leases (`SET NX EX lease_s`) keep two workers from grading the same chunk at once; the store's stored-marker keeps
a chunk that is graded twice anyway (a lease that ran out, a worker killed between grading and storing) from being
stored twice. A job whose chunk is already complete does nothing; one whose chunk another worker holds puts a new
job for it at the back of the queue after `lease_poll_s`, so the chunk is graded even if that worker dies.

Faults: `TransientEngineError` propagates, and RQ retries the job with backoff (`Retry` set at enqueue time). Any
other failure is permanent: the items are stored as `failed` with the reason — retrying never re-rolls a grade.
When RQ gives up on a job (retries exhausted, or abandoned by a killed worker with none left), `on_chunk_failure`
stores its remaining items as `failed` so no item is left without a result.

The job reaches the worker process's one `Judge` through `bind()`, called by the worker at start-up.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from juiz.judge import Judge, failed_judgement, item_fields, request_for, select_prompt
from juiz.labels import automated_label
from juiz.settings import Settings
from juiz.store import BatchRecord, ChunkRef, Store
from schemas import BatchOptions, BatchStatus, Judgement, JudgementStatus, Triple

log = logging.getLogger(__name__)

# The fields of a result that depend only on (question, answer, prompt, model, sampling): what the cache keeps.
CACHED_FIELDS = frozenset(
    {
        "status",
        "score",
        "normalized_score",
        "expected_score",
        "criteria",
        "supporting_evidence",
        "raw_output",
        "error",
        "latency_s",
        "provenance",
    }
)


@dataclass
class Binding:
    """What a job needs from its worker process: the judge (one engine), the store and the settings."""

    judge: Judge
    store: Store
    settings: Settings
    worker_name: str = field(default_factory=lambda: uuid.uuid4().hex[:8])


_binding: Binding | None = None


def bind(binding: Binding) -> None:
    """Called once by the worker after it has built its engine; jobs run in that same process (SimpleWorker)."""
    global _binding
    _binding = binding


def unbind() -> None:
    global _binding
    _binding = None


def bound() -> Binding:
    if _binding is None:
        raise RuntimeError("no judge bound in this process: chunk jobs run inside `juiz worker`")
    return _binding


@dataclass
class _Work:
    batch: BatchRecord
    chunk: ChunkRef
    items: list[tuple[int, Triple]]


def grade_chunk(batch_id: str, chunk_no: int) -> dict[str, int]:
    """Grade chunk `chunk_no` of batch `batch_id` (plus other pending chunks). Returns counts for RQ's logs."""
    b = bound()
    store = b.store
    batch = store.get_batch(batch_id)
    if batch is None or batch.status is BatchStatus.CANCELLED:
        return {"skipped": 1}
    own = ChunkRef(batch_id, chunk_no)
    token = f"{b.worker_name}:{uuid.uuid4().hex[:8]}"
    if not store.take_lease(own, token):
        if not store.chunk_items(batch, chunk_no):
            return {"already_done": 1}
        time.sleep(b.settings.lease_poll_s)
        store.enqueue_chunk(batch, chunk_no)
        log.info("chunk %s is being graded by another worker; queued it again", own.member)
        return {"deferred": 1}
    leased = [own]
    try:
        items = store.chunk_items(batch, chunk_no)
        if not items:
            store.drop_pending(batch.queue, [own])
            return {"already_done": 1}
        work = [_Work(batch, own, items)]
        work += _coalesce(b, batch.queue, own, b.settings.coalesce_max_items - len(items), token, leased)
        work += _gather(b, batch.queue, own, work, token, leased)
        return _grade_and_store(b, work)
    finally:
        for chunk in leased:
            store.release_lease(chunk, token)


def _gather(
    b: Binding, queue: str, own: ChunkRef, work: list[_Work], token: str, leased: list[ChunkRef]
) -> list[_Work]:
    """Wait up to gather_s for chunks still on their way when the call is not full.

    Clients that submit small batches at about the same time would otherwise each get an engine call of their own
    (the first chunk starts before the others are queued); a fraction of a second buys one larger call, which on a
    GPU costs about as much as a small one. /v1/grade never waits.
    """
    settings = b.settings
    budget = settings.coalesce_max_items - sum(len(w.items) for w in work)
    if queue == settings.priority_queue or settings.gather_s <= 0 or budget <= 0:
        return []
    extra: list[_Work] = []
    deadline = time.monotonic() + settings.gather_s
    while budget > 0 and (remaining := deadline - time.monotonic()) > 0:
        time.sleep(min(0.05, remaining))
        more = _coalesce(b, queue, own, budget, token, leased)
        extra += more
        budget -= sum(len(w.items) for w in more)
    return extra


def _coalesce(b: Binding, queue: str, own: ChunkRef, budget: int, token: str, leased: list[ChunkRef]) -> list[_Work]:
    """Lease other pending chunks that fit in the call: /v1/grade's chunks first, then the oldest batches'.

    A /v1/grade job takes only other /v1/grade chunks, so one triple never waits behind a large call.
    """
    settings, store = b.settings, b.store
    queues = [settings.priority_queue] if queue == settings.priority_queue else settings.queues
    extra: list[_Work] = []
    batches: dict[str, BatchRecord | None] = {}
    for name in queues:
        if budget <= 0:
            break
        for chunk in store.pending_chunks(name, limit=max(4, 2 * budget // settings.chunk_size + 4)):
            if budget <= 0:
                break
            if chunk == own or chunk in leased:
                continue
            if chunk.batch_id not in batches:
                batches[chunk.batch_id] = store.get_batch(chunk.batch_id)
            batch = batches[chunk.batch_id]
            if batch is None or batch.terminal:
                store.drop_pending(name, [chunk])
                continue
            if len(batch.chunk_range(chunk.chunk_no)) > budget or not store.take_lease(chunk, token):
                continue
            leased.append(chunk)
            items = store.chunk_items(batch, chunk.chunk_no)
            if not items:
                store.drop_pending(name, [chunk])
                continue
            extra.append(_Work(batch, chunk, items))
            budget -= len(items)
    return extra


def _grade_and_store(b: Binding, work: list[_Work]) -> dict[str, int]:
    store, judge, settings = b.store, b.judge, b.settings
    for batch_id in {w.batch.id for w in work}:
        store.mark_running(batch_id)
    flat = [(w, index, triple) for w in work for index, triple in w.items]
    results: dict[tuple[str, int], Judgement] = {}

    keys: list[str | None] = [None] * len(flat)
    if settings.result_cache:
        keys = [_cache_key_or_none(triple, w.batch.options, judge.engine.model_id) for w, _, triple in flat]
        cached = store.cache_get([k for k in keys if k is not None])
        hits = iter(cached)
        for (w, index, triple), key in zip(flat, keys, strict=True):
            if key is None:
                continue
            hit = next(hits)
            if hit is not None:
                results[(w.batch.id, index)] = _from_cache(hit, triple, w.batch.options)
        store.record_cache_hits(len(results))

    to_grade = [(i, entry) for i, entry in enumerate(flat) if (entry[0].batch.id, entry[1]) not in results]
    if to_grade:
        started = time.perf_counter()
        try:
            graded = judge.grade_many([(triple, w.batch.options) for _, (w, _, triple) in to_grade])
        except Exception as exc:
            if _transient(exc):
                raise  # RQ retries the job with backoff
            log.exception("grading failed permanently for %d item(s)", len(to_grade))
            reason = f"{type(exc).__name__}: {exc}"
            graded = [
                failed_judgement(triple, w.batch.options, judge.engine.model_id, reason)
                for _, (w, _, triple) in to_grade
            ]
        else:
            store.record_engine_call(time.perf_counter() - started, len(to_grade))
        fresh: dict[str, dict[str, Any]] = {}
        for (position, (w, index, _)), judgement in zip(to_grade, graded, strict=True):
            results[(w.batch.id, index)] = judgement
            key = keys[position]
            # Only clean grades are reused: a parse error may come from the engine dropping a request (an empty
            # reply with finish_reason=error), which a later call would not repeat.
            if key is not None and judgement.status is JudgementStatus.OK:
                fresh[key] = judgement.model_dump(mode="json", include=set(CACHED_FIELDS))
        store.cache_put(fresh)

    stored = 0
    for w in work:
        stored += len(store.store_results(w.batch, [(index, results[(w.batch.id, index)]) for index, _ in w.items]))
        store.drop_pending(w.batch.queue, [w.chunk])
    return {"chunks": len(work), "items": len(flat), "graded": len(to_grade), "stored": stored}


def _transient(exc: BaseException) -> bool:
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    from juiz.errors import TransientEngineError

    return isinstance(exc, TransientEngineError | RedisConnectionError | RedisTimeoutError)


def cache_key(triple: Triple, options: BatchOptions, model_id: str) -> str:
    """sha256 of everything a grade depends on: the question, the answer, the prompt (id and file hash), the model
    and the sampling settings. Context, ids and labels do not change the grade, so they are not in it."""
    template = select_prompt(options, triple.question)
    request = request_for(options.mode)
    payload = [triple.question, triple.answer, template.id, template.sha256, model_id, request.describe(), options.mode]
    return hashlib.sha256(json.dumps(payload, ensure_ascii=False, sort_keys=True).encode()).hexdigest()


def _cache_key_or_none(triple: Triple, options: BatchOptions, model_id: str) -> str | None:
    try:
        return cache_key(triple, options, model_id)
    except Exception:  # a prompt that can't be selected fails in grading, with its reason
        return None


def _from_cache(cached: dict[str, Any], triple: Triple, options: BatchOptions) -> Judgement:
    judgement = Judgement.model_validate({**item_fields(triple), **cached})
    judgement.automated_label = automated_label(judgement.score, options.label_mapping)
    return judgement


def on_chunk_failure(job: Any, connection: Any, exc_type: Any = None, exc_value: Any = None, tb: Any = None) -> None:
    """RQ's failure callback. Runs on every failure; acts only when RQ will not retry the job again."""
    if job.should_retry:
        return
    if _binding is None:
        log.error("job %s failed for good, but no judge is bound here to record it", job.id)
        return
    batch_id, chunk_no = job.args
    store, model_id = _binding.store, _binding.judge.engine.model_id
    batch = store.get_batch(batch_id)
    if batch is None or batch.terminal:
        return
    reason = f"gave up after retries: {exc_type.__name__ if exc_type else 'abandoned'}: {exc_value or ''}".rstrip(": ")
    items = store.chunk_items(batch, chunk_no)
    store.store_results(batch, [(i, failed_judgement(t, batch.options, model_id, reason)) for i, t in items])
    store.drop_pending(batch.queue, [ChunkRef(batch_id, chunk_no)])
    log.warning("chunk %s:%s failed for good (%s); %d item(s) marked failed", batch_id, chunk_no, reason, len(items))
