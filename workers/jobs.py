"""The RQ job: grade one chunk of a batch, and fill the engine call with other queued chunks.

A job carries only ids (`batch_id`, `chunk_no`, JSON-serialised); everything else is in Redis. It is thin:

    claim the chunk + a fair share of other pending chunks (Store.claim: one Lua step; their RQ jobs are then taken
    off the queue through RQ's API) → plan every item → drop items cached → grade the rest in ONE `Judge` call
    (its conversations done / planned written as it runs: workers.progress) → finish every grade, cached or fresh
    (label, calibration, uncertainty) → store (exactly once per item) → finish

One owner per chunk: the job that claimed it. A job whose chunk another job claimed first (it was dequeued before
its job was taken off the queue) finds it owned and stops at once; nothing re-queues itself.
The share is min(coalesce_max_items, ceil(waiting items / workers not grading)): one 256-item batch is split
between 4 idle workers, a backlog fills every call, and other chunks are taken round-robin by tenant. When its batch
is small (one chunk) and the call is not full, the job waits until `gather_s` after that batch was created for
chunks still on their way (blocking on the queue's events stream, woken by each submission), taking its fair share
of them (idle workers take theirs), so small batches from many clients share a call. Before claiming, a fresh batch's
job waits for a burst of submissions to end (`gather_quiet_s` without a new batch), so batches submitted together
are shared as one backlog rather than split by whichever arrived first; a lone large batch never waits longer than
that. /v1/grade never waits.

Small batches first: a job grading more than one chunk lets small batches (one chunk) submitted after it began in
between its engine calls, cutting the running call if need be (`SmallBatchesFirst`), so a small batch behind a deep
backlog waits about gather_s and one poll for an engine, not the rest of a chunk of up to coalesce_max_items items.

Faults:
- A worker killed mid-call: its heartbeat stops, RQ's maintenance finds the job abandoned within about
  heartbeat_ttl_s + maintenance_interval_s, and `on_chunk_failure` gives every chunk it held back (fresh RQ jobs).
  The store's stored-marker keeps an item graded twice (a worker that was only slow) from being stored twice. A chunk
  whose workers died more than MAX_ABANDONED times is failed instead (an item that crashes every worker).
- `TransientEngineError` (and OSError, timeouts and Redis errors from the engine call, which the judge reports as
  one): the chunks taken from other jobs go back to the queue, the job's own chunk stays for RQ's retry (`Retry`
  with backoff, set at enqueue time); past the retries its items are stored as `failed` with the reason.
- `EngineDeadError`: store nothing, give every chunk back, and stop the worker (non-zero exit; see workers.worker).
- Redis away or refusing writes (full, read-only, MISCONF) at any step: every read and chunk state change goes
  through `Binding.retried` (juiz.store.retrying), retried with backoff for up to `redis_retry_s`, and
  each is idempotent (a claim is read back from the owned set, a release repeated gives the same chunks back, the
  stored-marker makes a repeated store harmless). A job that gives up never drops owner entries of chunks it could
  not give back; what it leaves, RQ's abandoned-job handling or the sweeper (juiz.store.sweeper) requeues.
- Any other failure of the whole call is permanent: the items are stored as `failed` with the reason — retrying
  never re-rolls a grade. When RQ gives up on a job, `on_chunk_failure` stores its remaining items as `failed`.
- A batch cancelled during the call: `CallControl.cancelled` reports its items (one Redis round trip per poll) and
  the engine aborts their requests; the call's deadline is the job's timeout, so RQ's own timeout is a backstop.

Result cache: each item is planned once (`juiz.judging.plan.plan_or_reason`: its metrics' prompts, sampling and
provenance,
or why it can't be graded); the cache keys on that plan, the judge grades by it and a failed result records it. What
a key covers and what a hit keeps are `juiz.judging.result_cache`'s rules; a hit is finished with the fresh grades.

The job reaches the worker process's one `Judge` through `bind()`, called by the worker at start-up.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from rq import get_current_job
from rq.exceptions import AbandonedJobError
from rq.worker import Worker

from juiz.engines.base import CallControl, JudgeEngine
from juiz.judging.judge import Interjection, Judge
from juiz.judging.judgements import failed_judgement, finished, from_cache
from juiz.judging.plan import plan_or_reason, provenance_by_metric
from juiz.judging.result_cache import cache_key, cacheable, reusable
from juiz.runtime.errors import EngineDeadError, TransientEngineError
from juiz.runtime.retry import REDIS_ERRORS
from juiz.runtime.settings import Settings
from juiz.store import BatchRecord, ChunkRef, Store
from juiz.store.retrying import retrying
from schemas import BatchOptions, Judgement, Triple
from workers.progress import CallProgress

log = logging.getLogger(__name__)

MAX_ABANDONED = 3  # a chunk whose worker died this many times is given one more try, then failed
SMALL_FIRST_POLL_S = 0.25  # how often a grading looks for small batches to take ahead of its own work


@dataclass
class Binding:
    """What a job needs from its worker process: the judge (one engine), the store and the settings."""

    judge: Judge
    store: Store
    settings: Settings
    worker_name: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    engine_dead: EngineDeadError | None = None  # set by a job; the worker stops after it

    @functools.cached_property
    def retried(self) -> Store:
        """The store with every call retried while Redis is away or refuses writes, for up to redis_retry_s: what a
        job's steps use (each is idempotent). The heartbeat and the cancel poll use `store`: they must not wait."""
        return retrying(self.store, self.settings.redis_retry_s)

    @property
    def worker_key(self) -> str:
        return Worker.redis_worker_namespace_prefix + self.worker_name  # the key RQ gives a worker of this name


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
    """Grade chunk `chunk_no` of batch `batch_id` (plus a fair share of other pending chunks). Returns counts for
    RQ's logs.

    Every Redis step is retried while Redis is away (a restart), and each is idempotent: a claim whose reply was
    lost is read back from the job's owned set, a release repeated puts the same chunks back, and the owner entries
    are dropped only for chunks stored or given back, never for chunks a failed release left behind.
    """
    b = bound()
    store, settings = b.retried, b.settings
    job = get_current_job()
    job_id = job.id if job is not None else f"local-{uuid.uuid4().hex}"
    batch = store.get_batch(batch_id)
    if batch is None or batch.terminal:
        return {"skipped": 1}
    queue = batch.queue
    # An earlier run of this same job whose worker died may still hold chunks it took from other jobs.
    store.release(queue, job_id, store.owned(job_id))
    if queue != settings.priority_queue:
        _settle(b, batch)
    own = ChunkRef(batch_id, chunk_no)
    claimed_at = time.time()  # small batches created after this are taken ahead of this job's work
    claim = store.claim(queue, job_id, b.worker_key, own=own)
    if claim is None:
        return {"not_ours": 1}  # done, cancelled, or handed to a newer job while this one was taken as dead
    # The owned set is the truth: a claim retried after its reply was lost returns nothing the first one took.
    taken = _union(claim.chunks, store.owned(job_id))
    try:
        batches: dict[str, BatchRecord | None] = {batch_id: batch}
        work = _load(store, [own, *taken], batches)
        if queue != settings.priority_queue and batch.n_chunks == 1:
            taken += _gather(b, queue, job_id, work, batch.created_at, batches, taken)
        first = None
        large = [w for w in work if w.batch.n_chunks > 1]
        if queue != settings.priority_queue and sum(len(w.items) for w in large) > settings.chunk_size:
            # Small batches the claim took along are graded first, in calls of their own; more may come in between.
            small = [w for w in work if w.batch.n_chunks == 1]
            first = SmallBatchesFirst(b, queue, job_id, job, since=claimed_at, held=small)
            first.serve()
            work = large
        counts = _grade_and_store(b, work, job, first)
        if first is not None:
            first.serve()  # small batches taken during a grading that made no engine call after
    except EngineDeadError as exc:
        # Store nothing: every chunk goes back with a fresh job, and this worker stops after the job.
        log.error("engine dead: giving back %d chunk(s) and stopping this worker: %s", len(taken) + 1, exc)
        _give_back(b, queue, job_id, own, taken, own_requeue=True)
        b.engine_dead = exc
        return {"engine_dead": 1}
    except BaseException:
        # RQ retries this job (own chunk) or gives up on it (on_chunk_failure); the other chunks go back now.
        _give_back(b, queue, job_id, own, taken, own_requeue=False)
        raise
    store.finish(job_id, b.worker_key, [own, *taken])
    return counts


def _give_back(b: Binding, queue: str, job_id: str, own: ChunkRef, taken: list[ChunkRef], *, own_requeue: bool) -> None:
    """The chunks taken from other jobs back to `pending` with fresh jobs, retried until Redis answers; then the job's
    owned set and busy marker go. The own chunk goes back too with `own_requeue`; without it, it stays this job's
    for RQ's retry to claim again (out of `pending`, so no other job grades it before the retry's backoff is over;
    if RQ gives up, `on_chunk_failure` settles it). Owner entries are dropped only by a release that got through,
    so one that never did leaves them for the sweeper (juiz.store.sweeper) rather than orphaning the chunks."""
    store = b.retried
    store.release(queue, job_id, _union(taken, store.owned(job_id)))
    if own_requeue:
        store.release(queue, job_id, [own])
    store.finish(job_id, b.worker_key, [])


def _union(first: Sequence[ChunkRef], second: Sequence[ChunkRef]) -> list[ChunkRef]:
    return list(dict.fromkeys([*first, *second]))


def _load(store: Store, chunks: Sequence[ChunkRef], batches: dict[str, BatchRecord | None]) -> list[_Work]:
    work = []
    for chunk in chunks:
        if chunk.batch_id not in batches:
            batches[chunk.batch_id] = store.get_batch(chunk.batch_id)
        batch = batches[chunk.batch_id]
        if batch is None or batch.terminal:
            continue
        items = store.chunk_items(batch, chunk.chunk_no)
        if items:
            work.append(_Work(batch, chunk, items))
    return work


def _settle(b: Binding, batch: BatchRecord) -> None:
    """Before claiming a fresh batch, wait for a burst of submissions to end (no new batch for gather_quiet_s, and
    at most until gather_s after this batch was created), so the fair share is computed on the whole burst: 8
    batches submitted together are shared as one backlog, not split by whichever arrived first. A lone batch waits
    gather_quiet_s after its creation at most (usually less: its job starts later than that)."""
    settings = b.settings
    deadline = batch.created_at + settings.gather_s
    while (now := time.time()) < deadline:
        quiet_at = b.retried.last_batch_at(batch.queue) + settings.gather_quiet_s
        if now >= quiet_at:
            return
        time.sleep(min(quiet_at, deadline) - now)


def _gather(
    b: Binding,
    queue: str,
    job_id: str,
    work: list[_Work],
    created_at: float,
    batches: dict[str, BatchRecord | None],
    held: Sequence[ChunkRef],
) -> list[ChunkRef]:
    """For a small batch (one chunk): wait until gather_s after it was created for chunks still on their way, while
    the call is not full, taking this worker's fair share of what arrives.

    Clients that submit small batches at about the same time would otherwise each get an engine call of their own
    (the first chunk starts before the others are queued); a fraction of a second buys one larger call, which on a
    GPU costs about as much as a small one. Counting from the batch's creation bounds the wait per batch: a batch
    that has been queued that long (a backlog) starts at once; a batch of several chunks never waits here.
    """
    settings, store = b.settings, b.retried
    taken: list[ChunkRef] = []
    deadline = created_at + settings.gather_s
    have = sum(len(w.items) for w in work)
    # Read before the claim below, so a chunk queued after that claim still wakes the wait that follows it.
    cursor = store.chunk_events_cursor(queue)
    while have < settings.coalesce_max_items and time.time() < deadline:
        # The share is recomputed with what has arrived since: idle workers take their part of it themselves.
        store.claim(queue, job_id, b.worker_key, own=None, have=have)
        # What this job owns now, less what it held already: a claim retried after a lost reply loses nothing.
        known = {*held, *taken}
        fresh = [c for c in store.owned(job_id) if c not in known]
        taken += fresh
        more = _load(store, fresh, batches)
        work += more
        have += sum(len(w.items) for w in more)
        if have >= settings.coalesce_max_items or (remaining := deadline - time.time()) <= 0:
            break
        # Wakes when a batch is submitted or chunks are given back (or at the deadline), not on a timer.
        cursor = store.wait_for_chunks(queue, cursor, remaining)
    return taken


class SmallBatchesFirst(Interjection):
    """What a job grading more than one chunk of larger batches lets in between (and into) its engine calls: small
    batches (one chunk). Those its own claim took along are graded first, in calls of their own.

    A batch of one chunk submitted after the job claimed its work, and waiting `gather_s` since (time for an idle
    worker's job to take it and gather its neighbours), is taken by this job (`Chunks.take_small`, atomic: one job
    takes it), which cuts its running engine call (what the call finished is kept, the rest sent again after),
    grades and stores the small batches in calls of their own, and goes on. A small batch behind a deep backlog then
    waits about gather_s + one poll + its own calls, not the rest of a chunk of up to coalesce_max_items items; the
    backlog pays one more call per interruption. The small batches' own RQ jobs are taken off the queue."""

    def __init__(
        self, b: Binding, queue: str, job_id: str, job: Any, *, since: float, held: Sequence[_Work] = ()
    ) -> None:
        self.b, self.queue, self.job_id, self.job, self.since = b, queue, job_id, job, since
        self.held = list(held)  # small batches' work the job's claim took: served first
        self.chunks: list[ChunkRef] = []  # taken by `take`, not loaded yet
        self.asked_at = 0.0
        self.served_s = 0.0  # time spent serving, to keep out of the job's own engine-call time

    def take(self) -> bool:
        """Whether there are small batches to grade first (taken now, in one atomic step); cheap when polled often:
        Redis is asked at most every SMALL_FIRST_POLL_S, and a Redis fault is a no (the grading goes on)."""
        if self.held or self.chunks:
            return True
        now = time.monotonic()
        if now - self.asked_at < SMALL_FIRST_POLL_S:
            return False
        self.asked_at = now
        settings = self.b.settings
        try:
            self.chunks = self.b.store.chunks.take_small(
                self.queue,
                self.job_id,
                since=self.since,
                until=time.time() - settings.gather_s,
                budget=settings.coalesce_max_items,
            )
        except REDIS_ERRORS:
            return False
        return bool(self.chunks)

    def serve(self) -> None:
        """Grade and store what the job holds or `take` took, in calls of their own; then those chunks are done with.
        A failure propagates to the job, which gives them back with the rest of its chunks."""
        started = time.perf_counter()
        work = self.held + _load(self.b.retried, self.chunks, {})
        self.held, self.chunks = [], []
        if not work:
            return
        counts = _grade_and_store(self.b, work, self.job)
        self.b.retried.chunks.done_with(self.job_id, [w.chunk for w in work])
        self.served_s += time.perf_counter() - started
        log.info("graded %d small batch chunk(s) ahead of job %s: %s", len(work), self.job_id, counts)


def _grade_and_store(b: Binding, work: list[_Work], job: Any, first: Interjection | None = None) -> dict[str, int]:
    """Plan → cache lookup → grade → finish → store, each once for the whole call, in that order. `first`: other
    work let in between the call's waves (SmallBatchesFirst)."""
    store, judge, settings = b.retried, b.judge, b.settings
    if not work:
        return {"chunks": 0, "items": 0, "graded": 0, "stored": 0}
    flat = [(w, index, triple) for w in work for index, triple in w.items]
    # The call's bounds, which the job itself decides: RQ's timeout, cancelled batches (item by item of `flat`).
    control = _call_control(b.store, [w.batch.id for w, _, _ in flat], job)
    # One plan per item: the cache keys on it, the judge grades by it and a failed result records it. An item whose
    # prompt can't be served (e.g. its file removed since intake) fails alone: sent to the judge, it would fail the
    # whole call, other batches' items with its reason.
    planned = [plan_or_reason(w.batch.options, triple.question, judge.engine) for w, _, triple in flat]
    keys = [
        cache_key(triple, w.batch.options, item.plan, _cache_scope(settings, w.batch))
        if settings.result_cache and item.plan is not None
        else None
        for (w, _, triple), item in zip(flat, planned, strict=True)
    ]
    # The Redis steps before the call, together: the batches marked running; with the result cache, each batch's
    # keys remembered (so a purge erases them) and read.
    for batch_id in {w.batch.id for w in work}:
        store.mark_running(batch_id)
    cached: list[dict[str, Any] | None] = [None] * len(flat)
    if settings.result_cache:
        digests: dict[str, list[str]] = {}
        for (w, _, _), key in zip(flat, keys, strict=True):
            if key is not None:
                digests.setdefault(w.batch.id, []).append(key)
        store.cache.remember(digests)
        found = iter(store.cache_get([k for k in keys if k is not None]))
        cached = [None if key is None else next(found) for key in keys]
        store.record_cache_hits(sum(h is not None for h in cached))
    failures = {position: item.reason for position, item in enumerate(planned) if item.reason is not None}
    to_grade = [position for position, item in enumerate(planned) if item.plan is not None and cached[position] is None]
    graded: dict[int, Judgement] = {}
    engine_call: tuple[float, int] | None = None
    # Conversations done / planned per chunk, written while the call runs (workers.progress).
    call = CallProgress(
        b.store, settings.progress_interval_s, [w.chunk for w, _, _ in flat], to_grade, settings.redis_retry_s
    )
    call.start()
    if to_grade:
        started = time.perf_counter()
        served_s = first.served_s if isinstance(first, SmallBatchesFirst) else 0.0
        try:
            # Unfinished: every result of the call, cached or fresh, is finished below, in one place.
            grades = judge.grade_unfinished(
                [(flat[position][2], flat[position][0].batch.options) for position in to_grade],
                control.subset(to_grade),
                plans=[planned[position].plan for position in to_grade],
                progress=call.progress,
                interject=first,
            )
        except (TransientEngineError, EngineDeadError):
            call.stop()
            raise  # RQ retries the job with backoff / the worker stops
        except Exception as exc:
            if isinstance(exc, REDIS_ERRORS):
                call.stop()
                raise
            log.exception("grading failed permanently for %d item(s)", len(to_grade))
            failures.update(dict.fromkeys(to_grade, f"{type(exc).__name__}: {exc}"))
        except BaseException:
            call.stop()  # a job timeout, Ctrl-C
            raise
        else:
            # The call's own time: small batches graded in between are recorded as calls of their own.
            if isinstance(first, SmallBatchesFirst):
                served_s = first.served_s - served_s
            engine_call = (time.perf_counter() - started - served_s, len(to_grade))
            graded = dict(zip(to_grade, grades, strict=True))
    call.finish()
    hits = {position: from_cache(hit, flat[position][2]) for position, hit in enumerate(cached) if hit is not None}
    # A grade, cached or fresh, gets this batch's label, calibration and uncertainty, in this one place; a failed
    # result has no grade to finish.
    results = {
        position: (
            failed_judgement(triple, w.batch.options, failures[position], planned[position].provenance)
            if position in failures
            else finished(hits[position] if position in hits else graded[position], w.batch.options)
        )
        for position, (w, _, triple) in enumerate(flat)
    }
    fresh = {key: cacheable(grade) for p, grade in graded.items() if (key := keys[p]) is not None and reusable(grade)}
    # The Redis steps after the call, together: the call's timing, the fresh cache entries, then each chunk's results
    # (a cancelled batch's are refused by the store script: aborted requests are never stored).
    if engine_call is not None:
        store.record_engine_call(*engine_call)
    store.cache_put(fresh)
    stored = 0
    for w in work:
        chunk_results = [(index, results[position]) for position, (chunk, index, _) in enumerate(flat) if chunk is w]
        stored += len(store.store_results(w.batch, chunk_results))
    call.fold()
    return {"chunks": len(work), "items": len(flat), "graded": len(to_grade), "stored": stored}


def _never_graded(triple: Triple, options: BatchOptions, engine: JudgeEngine, reason: str) -> Judgement:
    """The failed result of an item whose chunk was given up on before any plan was made for it."""
    return failed_judgement(triple, options, reason, provenance_by_metric(options, triple.question, engine))


def _call_control(store: Store, batch_of_item: list[str], job: Any) -> CallControl:
    """Cancel: items of batches cancelled since the call began (one pipelined HGET per poll). Deadline: the job's
    timeout, less a margin to store the results, so RQ's own timeout (which interrupts the call) is a backstop."""
    ids = sorted(set(batch_of_item))

    def cancelled() -> Collection[int]:
        try:
            gone = store.cancelled_batches(ids)
        except REDIS_ERRORS:
            return ()  # Redis away: nothing is known to be cancelled; the call goes on
        return [i for i, batch_id in enumerate(batch_of_item) if batch_id in gone] if gone else ()

    deadline = None
    timeout = getattr(job, "timeout", None)
    if isinstance(timeout, int | float) and timeout > 0:
        started = getattr(job, "started_at", None)
        elapsed = 0.0 if started is None else max(0.0, time.time() - started.timestamp())
        deadline = time.monotonic() + max(1.0, 0.9 * timeout - elapsed)
    return CallControl(deadline=deadline, cancelled=cancelled)


def _cache_scope(settings: Settings, batch: BatchRecord) -> str | None:
    """The tenant a cached result belongs to; None (shared by all tenants) only with shared_result_cache."""
    return None if settings.shared_result_cache else batch.tenant


def on_chunk_failure(job: Any, connection: Any, exc_type: Any = None, exc_value: Any = None, tb: Any = None) -> None:
    """RQ's failure callback, also run by RQ's maintenance for a job whose worker died (AbandonedJobError).

    Abandoned: every chunk the job held goes back to the queue with a fresh job, at once (RQ's own retry of the
    job, if any, then finds its chunk taken and does nothing). Otherwise it acts only when RQ will not retry the
    job again: the chunk's remaining items are stored as `failed` with the reason.
    """
    if _binding is None:
        log.error("job %s failed, but no judge is bound here to record it", job.id)
        return
    batch_id, chunk_no = job.args
    store, engine = _binding.retried, _binding.judge.engine
    batch = store.get_batch(batch_id)
    if batch is None or batch.terminal:
        return
    own = ChunkRef(batch_id, chunk_no)
    if exc_type is not None and issubclass(exc_type, AbandonedJobError):
        held = _union([own], store.owned(job.id))
        deaths = store.count_abandoned(held)
        poison = [c for c, n in zip(held, deaths, strict=True) if n > MAX_ABANDONED]
        back = store.release(batch.queue, job.id, [c for c in held if c not in poison])
        log.warning("job %s was abandoned by its worker; %d chunk(s) queued again", job.id, len(back))
        for chunk in poison:  # every worker that graded it died: fail its items rather than kill the next one
            chunk_batch = store.get_batch(chunk.batch_id)
            if chunk_batch is None or chunk_batch.terminal:
                continue
            reason = f"gave up: {MAX_ABANDONED + 1} workers died while grading this item's chunk"
            items = store.chunk_items(chunk_batch, chunk.chunk_no)
            failed = [(i, _never_graded(t, chunk_batch.options, engine, reason)) for i, t in items]
            store.store_results(chunk_batch, failed)
            store.release(chunk_batch.queue, job.id, [chunk], requeue=False)
            store.drop_pending(chunk_batch.queue, [chunk])
            log.error("chunk %s: %s; %d item(s) marked failed", chunk.member, reason, len(items))
        return
    if job.should_retry:
        return
    reason = f"gave up after retries: {exc_type.__name__ if exc_type else 'abandoned'}: {exc_value or ''}".rstrip(": ")
    items = store.chunk_items(batch, chunk_no)
    failed = [(i, _never_graded(t, batch.options, engine, reason)) for i, t in items]
    store.store_results(batch, failed)
    # RQ won't run it again: nobody waits
    store.drop_pending(batch.queue, [own])
    store.release(batch.queue, job.id, store.owned(job.id))
    store.finish(job.id, _binding.worker_key, [own])
    log.warning("chunk %s:%s failed for good (%s); %d item(s) marked failed", batch_id, chunk_no, reason, len(items))
