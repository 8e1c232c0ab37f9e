"""Redis restarts under load (issue 17's first "done when") — a FAKE engine, no model.

A private stack with a restartable Redis: `redis-server --appendonly yes --appendfsync always` in a directory of its
own (bench.stack.DurableRedis), so a restart keeps every write Redis acknowledged, as the fault tests restart it
(tests/integration/test_outages.py: SHUTDOWN, then a new redis-server on the same port and directory). `juiz serve`
and --workers (2) worker processes (`bench.fake_worker`: the real worker loop `workers.worker.run` on a FAKE engine
costing --call-s per call plus --item-s per item), all with the default settings (heartbeats, retries, sweeper).

One batch of --items (2,000) items is POSTed. While it is graded, Redis is restarted --restarts (20) times at random
moments: up for uniform(--up-s) seconds, then SHUTDOWN, down for uniform(--down-s) seconds (0.5–3 s), started again.
The restarts stop when the batch is over (their count during the batch is reported); the FAKE cost is set so the
batch outlasts them. Meanwhile a poller GETs /v1/batches/{id} every --poll-ms (100) ms.

Figures: the batch done or not (and seconds after its last restart); every item stored exactly once (results read
back: none missing, none twice); items the engine graded more than once (the workers' own call log, a file, since
Redis is what goes away: work redone after an outage, harmless but counted); both worker processes alive and
registered at the end; the API's 5xx answers to the poller, split into "recovering" (the poll overlapped an outage
or the first --grace-s (1) second after Redis answered again) and "steady" (every other poll), and any 503 without
Retry-After. Target: batch done,
every item once, both workers alive, 0 steady 5xx.

    .venv/bin/python -m bench.chaos [--items 2000] [--workers 2] [--restarts 20] [--seed 17]

Writes bench/results/chaos.json (fake_engine: true) with the machine it ran on.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import httpx
from redis import Redis
from redis.exceptions import RedisError
from rq import Queue, Worker

from bench.common import COT_PROMPT, WORK, build_triples, save, setup_logging, triple_dicts
from bench.fake_worker import FAKE_MODEL_ID
from bench.stack import Stack, service
from juiz.store import Store

log = logging.getLogger("bench.chaos")

NAME = "chaos"
TAG = "chaos"


@dataclass
class Poll:
    sent: float  # wall clock
    answered: float
    status: int | None  # None: no HTTP answer (the API itself unreachable, or a timeout)
    error: str | None = None
    retry_after: bool = False  # the answer carried Retry-After (every 503 should: issue 17 item 7)


class Poller(threading.Thread):
    """GET /v1/batches/{id} every `every_s`, recording each answer, until stopped."""

    def __init__(self, stack: Stack, batch_id: str, every_s: float) -> None:
        super().__init__(daemon=True)
        self.url = f"{stack.url}/v1/batches/{batch_id}"
        self.headers = {"Authorization": f"Bearer {stack.api_key}"}
        self.every_s = every_s
        self.polls: list[Poll] = []
        self.halt = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=10, headers=self.headers) as http:
            while not self.halt.is_set():
                sent = time.time()
                retry_after = False
                try:
                    response = http.get(self.url)
                    status: int | None = response.status_code
                    retry_after, error = "retry-after" in response.headers, None
                except httpx.HTTPError as exc:
                    status, error = None, type(exc).__name__
                self.polls.append(Poll(sent, time.time(), status, error, retry_after))
                self.halt.wait(max(0.0, self.every_s - (time.time() - sent)))


def batch_state(redis_url: str, store_settings: Any, batch_id: str) -> tuple[bool, int]:
    """(terminal, items done) of the batch, or (False, -1) while Redis is away."""
    try:
        with Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=1) as redis:
            record = Store(redis, store_settings).get_batch(batch_id)
    except RedisError:
        return False, -1
    return (record is not None and record.terminal), (record.counts.done if record is not None else 0)


def classify(polls: list[Poll], outages: list[tuple[float, float]], grace_s: float) -> dict[str, dict[str, Any]]:
    """Polls split by whether they overlapped an outage or its first `grace_s` seconds after Redis was back."""

    def recovering(p: Poll) -> bool:
        return any(p.sent < back + grace_s and p.answered > down for down, back in outages)

    out: dict[str, dict[str, Any]] = {}
    for kind in ("recovering", "steady"):
        mine = [p for p in polls if recovering(p) == (kind == "recovering")]
        statuses = Counter(str(p.status) if p.status is not None else p.error or "no answer" for p in mine)
        out[kind] = {
            "polls": len(mine),
            "http_5xx": sum(1 for p in mine if p.status is not None and p.status >= 500),
            "no_answer": sum(1 for p in mine if p.status is None),
            "503_without_retry_after": sum(1 for p in mine if p.status == 503 and not p.retry_after),
            "by_status": dict(sorted(statuses.items())),
        }
    steady_5xx = [p for p in polls if not recovering(p) and p.status is not None and p.status >= 500]
    # Where the steady 5xx fell, in seconds after the nearest preceding recovery: the pattern of a stale connection.
    out["steady"]["5xx_seconds_after_redis_back"] = [
        round(p.sent - max((back for _, back in outages if back <= p.sent), default=p.sent), 2) for p in steady_5xx
    ]
    return out


def engine_work(calls_file: str) -> dict[str, Any]:
    """From the workers' call log: items graded per call, and items graded more than once."""
    calls = []
    if os.path.exists(calls_file):
        with open(calls_file, encoding="utf-8") as f:
            calls = [json.loads(line) for line in f if line.strip()]
    graded = Counter(tag for c in calls for tag in c["tags"] if tag.startswith(f"{TAG}-"))
    return {
        "engine_calls": len([c for c in calls if any(t.startswith(f"{TAG}-") for t in c["tags"])]),
        "items_graded_by_engine": len(graded),
        "items_graded_more_than_once": sum(1 for n in graded.values() if n > 1),
        "engine_gradings": sum(graded.values()),
        "calls_with_aborted_items": sum(1 for c in calls if c.get("aborted")),
        "per_worker_calls": dict(Counter(str(c["pid"]) for c in calls)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--restarts", type=int, default=20)
    parser.add_argument("--up-s", default="0.5,4", help="uniform range of seconds Redis stays up between restarts")
    parser.add_argument("--down-s", default="0.5,3", help="uniform range of seconds Redis stays down")
    parser.add_argument("--grace-s", type=float, default=1.0, help="5xx this soon after Redis is back are expected")
    parser.add_argument("--poll-ms", type=float, default=100.0)
    parser.add_argument("--call-s", type=float, default=0.5, help="FAKE engine: fixed seconds per call")
    parser.add_argument("--item-s", type=float, default=0.1, help="FAKE engine: seconds per item")
    parser.add_argument(
        "--coalesce-max-items",
        type=int,
        default=None,
        help="items per engine call (default: the setting's 256); 32 = one chunk per call: many more claims, stores "
        "and RQ bookkeeping steps for the restarts to hit",
    )
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--timeout-s", type=float, default=900, help="give up on the batch after this long")
    args = parser.parse_args(argv)
    setup_logging()
    rng = random.Random(args.seed)
    up_range = tuple(float(x) for x in args.up_s.split(","))
    down_range = tuple(float(x) for x in args.down_s.split(","))
    calls_file = str(WORK / NAME / "calls.jsonl")
    (WORK / NAME).mkdir(parents=True, exist_ok=True)
    if os.path.exists(calls_file):
        os.remove(calls_file)
    env = {
        "JUIZ_FAKE_CALL_S": str(args.call_s),
        "JUIZ_FAKE_ITEM_S": str(args.item_s),
        "JUIZ_FAKE_CALLS_FILE": calls_file,
        "JUIZ_RESULT_CACHE": "false",  # every item graded: nothing answered from a previous run
        # The stack's hour-long job timeout (made for vLLM on CPU) back to the default: every other setting is the
        # default too, a production-like fleet whose recovery paths are under test.
        "JUIZ_JOB_TIMEOUT_S": "900",
    }
    if args.coalesce_max_items is not None:
        env["JUIZ_COALESCE_MAX_ITEMS"] = str(args.coalesce_max_items)
    items = triple_dicts(build_triples(args.items, TAG))
    outages: list[tuple[float, float]] = []
    with service(NAME, FAKE_MODEL_ID, fake=True, env=env, workers=args.workers, durable_redis=True) as stack:
        server = stack.redis_server
        assert server is not None
        settings = stack.settings
        with stack.client() as client:
            view = client.submit(items, options={"prompt": COT_PROMPT})
        batch_id = view.id
        submitted = time.time()
        poller = Poller(stack, batch_id, args.poll_ms / 1000)
        poller.start()
        done_at_restart: list[int] = []
        try:
            while len(outages) < args.restarts:
                time.sleep(rng.uniform(*up_range))
                terminal, done = batch_state(stack.redis_url, settings, batch_id)
                if terminal:
                    break
                done_at_restart.append(done)
                down_at = time.time()
                server.shutdown()
                time.sleep(rng.uniform(*down_range))
                back_at = server.start()
                outages.append((down_at, back_at))
                down_s = back_at - down_at
                log.info("restart %d: down %.2f s at %d/%d items done", len(outages), down_s, done, args.items)
            deadline = time.monotonic() + args.timeout_s
            while not batch_state(stack.redis_url, settings, batch_id)[0]:
                stack.check()
                if time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            time.sleep(1.5)  # the poller sees the batch done, Redis up for a while
        finally:
            poller.halt.set()
            poller.join(timeout=15)
        ended = time.time()
        redis = Redis.from_url(stack.redis_url)
        store = Store(redis, settings)
        record = store.get_batch(batch_id)
        assert record is not None
        results = store.results_in_input_order(batch_id)
        ids = Counter(j.id for j in results)
        expected = {item["id"] for item in items}
        alive = [c.name for c in stack.children if c.name.startswith("worker") and c.process.poll() is None]
        registered = Worker.count(queue=Queue(settings.queue, connection=redis))  # in RQ's registry for the queue
        counters = store.counters()
        redis.close()
        stack.check()

    during = sum(1 for down, _ in outages if down < (record.finished_at or ended))
    polls = classify(poller.polls, outages, args.grace_s)
    work = engine_work(calls_file)
    figures = {
        "batch_status": record.status.value,
        "batch_done": record.status.value == "done" and record.counts.done == record.total,
        "items": args.items,
        "results_stored": len(results),
        "missing": len(expected - set(ids)),
        "stored_twice": sum(1 for n in ids.values() if n > 1),
        "unexpected_ids": len(set(ids) - expected),
        "counts": record.counts.model_dump(mode="json"),
        "seconds_submit_to_done": round((record.finished_at or ended) - submitted, 2),
        "seconds_last_restart_to_done": round((record.finished_at or ended) - outages[-1][1], 2) if outages else None,
        "restarts": len(outages),
        "restarts_during_batch": during,
        "outage_seconds": [round(back - down, 2) for down, back in outages],
        "items_done_at_each_restart": done_at_restart,
        "workers_alive": len(alive),
        "workers_registered": registered,
        "engine": work,
        "polls": polls,
        "worker_counters": {k: v for k, v in counters.items() if k.startswith(("items_", "engine_", "cache_"))},
    }
    ok = {
        "batch_done": figures["batch_done"],
        "every_item_once": figures["missing"] == 0 and figures["stored_twice"] == 0 and len(results) == args.items,
        "workers_alive": len(alive) == args.workers and registered == args.workers,
        "no_steady_5xx": polls["steady"]["http_5xx"] == 0,
        "all_restarts_during_batch": during == args.restarts,
    }
    print(f"\nRedis restarts under load — FAKE ENGINE, {args.workers} workers, {args.items} items")
    print(
        f"restarts: {len(outages)} ({during} while the batch ran), down {min(figures['outage_seconds'], default=0)}–"
        f"{max(figures['outage_seconds'], default=0)} s; batch {record.status.value} {record.counts.done}/"
        f"{record.total} in {figures['seconds_submit_to_done']} s"
    )
    print(
        f"results: {len(results)} stored, {figures['missing']} missing, {figures['stored_twice']} twice; engine graded "
        f"{work['items_graded_more_than_once']} item(s) more than once ({work['engine_gradings']} gradings)"
    )
    print(f"workers: {len(alive)} alive, {registered} registered")
    for kind, p in polls.items():
        print(f"polls {kind}: {p['polls']}, 5xx {p['http_5xx']}, no answer {p['no_answer']}, {p['by_status']}")
    print("targets: " + ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in ok.items()))
    payload = {
        "fake_engine": True,
        "engine": FAKE_MODEL_ID,
        "redis_restart": "SHUTDOWN, then redis-server again on the same port and dir; --appendonly yes "
        "--appendfsync always: every acknowledged write survives the restart",
        "fake_costs_s": {"call": args.call_s, "item": args.item_s},
        "seed": args.seed,
        "up_s": up_range,
        "down_s": down_range,
        "grace_s": args.grace_s,
        "poll_ms": args.poll_ms,
        "settings": {
            k: getattr(settings, k)
            for k in (
                "chunk_size",
                "coalesce_max_items",
                "heartbeat_ttl_s",
                "redis_retry_s",
                "sweep_interval_s",
                "sweep_grace_s",
                "redis_health_check_s",
                "maintenance_interval_s",
            )
        },
        **figures,
        "targets_met": ok,
        "load_average_1min_at_end": round(os.getloadavg()[0], 2),
    }
    print(f"written: {save(NAME, payload)}")
    return 0 if all(ok.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
