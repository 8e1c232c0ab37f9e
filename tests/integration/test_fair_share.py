"""Claim's fair share (juiz.store.chunks): what waits is split between the workers RQ has alive and registered for the
queue that are not grading (juiz's busy markers). The workers are listed through RQ's public API just before the
claim script, which touches juiz's keys only. Real Redis; RQ workers registered through RQ's API, no
worker process, no engine."""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis
from rq import Queue, Worker

from juiz.runtime.settings import Settings
from juiz.store import ChunkRef, Claim, Store, text
from schemas import BatchOptions, Triple
from tests.integration.helpers import make_settings, triples


def rq_worker(redis: Redis, queue: str, name: str) -> str:
    """A worker RQ knows as alive and listening to `queue` (registered as a worker does at start); its key."""
    worker = Worker([Queue(queue, connection=redis)], connection=redis, name=name)
    worker.register_birth()
    return str(worker.key)


def test_the_fair_share_splits_a_batch_between_the_idle_workers_only(redis: Redis, redis_url: str) -> None:
    settings: Settings = make_settings(redis_url, chunk_size=4, coalesce_max_items=32)
    store = Store(redis, settings)
    queue = settings.queue
    me, idle, also_idle, busy, dead = (rq_worker(redis, queue, n) for n in ("me", "idle", "also-idle", "busy", "dead"))
    rq_worker(redis, settings.priority_queue, "elsewhere")  # idle, but not listening to this queue
    redis.delete(dead)  # its heartbeat lapsed: RQ's record is gone, its registration not yet cleaned
    batch, _ = store.create_batch("t", BatchOptions(), [Triple.model_validate(t) for t in triples(28)])  # 7 chunks
    assert store.claim(queue, "busy-job", busy, own=ChunkRef(batch.id, 6), budget=0) is not None  # now grading

    # me, idle, also-idle: 24 items waiting (its own chunk included), 8 each
    mine = store.claim(queue, "my-job", me, own=ChunkRef(batch.id, 0))
    assert mine is not None and mine.share == 8 and mine.chunks == [ChunkRef(batch.id, 1)]
    # me is grading now: 16 items left for idle and also-idle
    theirs = store.claim(queue, "idle-job", idle, own=ChunkRef(batch.id, 2))
    assert theirs is not None and theirs.share == 8 and theirs.chunks == [ChunkRef(batch.id, 3)]
    last = store.claim(queue, "also-idle-job", also_idle, own=ChunkRef(batch.id, 4))
    assert last is not None and last.share == 8 and last.chunks == [ChunkRef(batch.id, 5)]
    assert store.pending_chunk_count(queue) == 0


def test_a_worker_that_finished_is_free_again(redis: Redis, redis_url: str) -> None:
    settings = make_settings(redis_url, chunk_size=4, coalesce_max_items=32)
    store = Store(redis, settings)
    me, other = rq_worker(redis, settings.queue, "me"), rq_worker(redis, settings.queue, "other")
    first, _ = store.create_batch("t", BatchOptions(), [Triple.model_validate(t) for t in triples(4)])
    assert store.claim(settings.queue, "other-job", other, own=ChunkRef(first.id, 0)) is not None
    store.create_batch("t", BatchOptions(), [Triple.model_validate(t) for t in triples(16)])

    busy = store.claim(settings.queue, "probe-job", me, own=None)  # `other` grading: all 16 items are mine
    assert busy is not None and busy.share == 16
    store.release(settings.queue, "probe-job", busy.chunks, requeue=False)
    store.finish("other-job", other, [ChunkRef(first.id, 0)])
    idle = store.claim(settings.queue, "my-job", me, own=None)  # `other` done: half each
    assert idle is not None and idle.share == 8 and len(idle.chunks) == 2


def test_no_script_touches_an_rq_key(redis: Redis, redis_url: str) -> None:
    """Every command a script runs (MONITOR shows them as the `lua` client's), keys it was given and keys it built
    alike, during claims that compute a fair share between registered workers, a release and a finish."""
    settings = make_settings(redis_url, chunk_size=4, coalesce_max_items=16)
    store = Store(redis, settings)
    me, other = rq_worker(redis, settings.queue, "me"), rq_worker(redis, settings.queue, "other")
    batch, _ = store.create_batch("t", BatchOptions(), [Triple.model_validate(t) for t in triples(16)])
    end = "end-of-test-no-script-touches-an-rq-key"
    with redis.monitor() as monitor:
        claim = store.claim(settings.queue, "a-job", me, own=ChunkRef(batch.id, 0))
        assert claim is not None and claim.share == 8  # split with `other`: the registry was read
        assert store.claim(settings.queue, "b-job", other, own=ChunkRef(batch.id, 2)) is not None
        store.release(settings.queue, "a-job", claim.chunks)
        store.finish("b-job", other, [ChunkRef(batch.id, 2)])
        redis.echo(end)
        commands = []
        while end not in (command := monitor.next_command())["command"]:
            commands.append(command)
    scripted = [text(c["command"]).split() for c in commands if c["client_type"] == "lua"]
    assert scripted, "no script command seen"
    assert [c for c in scripted if any(arg.startswith("rq:") for arg in c)] == []


def test_a_worker_that_starts_grading_just_before_the_script_is_not_counted_free(
    redis: Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers claiming at once: another worker's claim script runs after everything this claim read beforehand (RQ's
    registry) and before its own script. Whether each worker is grading is read in the script, so the one that started
    grading meanwhile does not shrink the others' shares. (Counted before the script, it did: uneven calls, 160 / 96
    items where 128 each was fair, in bench.scale_out's backlog at W=8.)"""
    settings = make_settings(redis_url, chunk_size=4, coalesce_max_items=32)
    store = Store(redis, settings)
    queue = settings.queue
    me, other, _third = (rq_worker(redis, queue, n) for n in ("me", "other", "third"))
    store.create_batch("t", BatchOptions(), [Triple.model_validate(t) for t in triples(24)])  # 6 chunks
    script = store.chunks._claim
    theirs: list[Claim | None] = []

    def other_claims_first(**call: Any) -> Any:
        if not theirs:  # `other` claims between my reads and my script
            theirs.append(None)
            theirs[0] = store.claim(queue, "other-job", other, own=None)
        return script(**call)

    monkeypatch.setattr(store.chunks, "_claim", other_claims_first)
    mine = store.claim(queue, "my-job", me, own=None)

    assert theirs[0] is not None and theirs[0].share == 8  # me, other, third free: 24 / 3
    assert mine is not None and mine.share == 8 and len(mine.chunks) == 2  # me, third free: 16 / 2 (not 16 / 3)
