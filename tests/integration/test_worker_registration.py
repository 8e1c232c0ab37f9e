"""A live worker whose registration Redis lost registers again (the chaos benchmark once ended with a live worker
missing from `rq:workers:{queue}`).

What the chaos run showed (bench/work/chaos/redis-aof): back-to-back restarts kept a busy worker's heartbeats from
reaching Redis for longer than its key's TTL; the key expired, another worker's maintenance (RQ's
`clean_worker_registry`) took it out of the registry, and the worker's next heartbeat recreated its hash but nothing
put it back in the registry. Here the same state is made without timing: the worker is paused (SIGSTOP: as silent as
behind an outage), its key expires, RQ's registry cleaning runs, the worker goes on (SIGCONT). Real `bench.fake_worker`
subprocesses on the FAKE engine; waits on state with a deadline.
"""

from __future__ import annotations

import signal

import pytest
from redis import Redis
from rq import Queue
from rq.worker_registration import REDIS_WORKER_KEYS, WORKERS_BY_QUEUE_KEY, clean_worker_registry, get_keys

from bench.fake_worker import RUNNING_KEY
from juiz.runtime.settings import Settings
from juiz.store import Store, text
from juiz.store.queues import MODEL_FIELD
from schemas import BatchOptions, Triple
from tests.integration.fake_workers import Workers, wait_until
from tests.integration.helpers import make_settings, triples


def registered(redis: Redis, settings: Settings, key: str) -> bool:
    """In every registry RQ and juiz read (the queues' sets: claim's fair share; the global set: /ready), with the
    model it announced."""
    sets = [REDIS_WORKER_KEYS, *(WORKERS_BY_QUEUE_KEY % name for name in settings.queues)]
    return all(redis.sismember(s, key) for s in sets) and redis.hget(key, MODEL_FIELD) is not None


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "mid-call"])
def test_a_worker_whose_key_expired_registers_again(redis: Redis, redis_url: str, workers: Workers, busy: bool) -> None:
    # worker_ttl_s=20: an idle worker's dequeue wakes every 5 s (RQ: worker_ttl - 15) and beats then.
    settings = make_settings(redis_url, worker_ttl_s=20, heartbeat_interval_s=0.2, heartbeat_ttl_s=3, gather_s=0)
    worker = workers.start(settings, JUIZ_FAKE_CALL_S="600")
    queue = WORKERS_BY_QUEUE_KEY % settings.queue
    wait_until(lambda: redis.scard(queue) == 1, "the worker to register")
    (key,) = (text(k) for k in redis.smembers(queue))
    assert registered(redis, settings, key)
    if busy:
        Store(redis, settings).create_batch("t", BatchOptions(), [Triple.model_validate(t) for t in triples(2)])
        wait_until(lambda: redis.llen(RUNNING_KEY) == 1, "the worker's engine call")

    worker.send_signal(signal.SIGSTOP)  # silent, as behind a Redis outage longer than its key's TTL
    try:
        redis.pexpire(key, 1)
        wait_until(lambda: not redis.exists(key), "the worker's key to expire")
        for name in settings.queues:  # what any other worker's maintenance does next
            clean_worker_registry(Queue(name, connection=redis))
        assert key not in get_keys(connection=redis) and redis.scard(queue) == 0
    finally:
        worker.send_signal(signal.SIGCONT)

    wait_until(lambda: registered(redis, settings, key), "the worker to register again")
    assert worker.poll() is None
    if busy:
        assert redis.llen(RUNNING_KEY) == 1  # re-registered during the same call, not after it
        worker.kill()  # the call would run for minutes: a stop request waits for it
        worker.wait(timeout=30)
