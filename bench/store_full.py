"""Redis full during a batch — a FAKE engine, no model.

A private stack (redis-server, `juiz serve` with the rate limit on, --workers (2) worker processes on the FAKE engine,
default settings). One batch of --items (2,000) items is POSTed; once --full-after (10 %) of it is done, Redis is made
full: maxmemory set to what it uses now, policy noeviction, and ballast written until it refuses, again every 0.2 s
for --full-s (60) seconds, so whatever the workers or RQ free is taken at once. Then maxmemory is raised (0: no
limit) and the batch is waited for. Meanwhile a poller GETs /v1/batches/{id} every --poll-ms and a submitter POSTs a
one-item batch every --post-s seconds.

Figures: worker processes alive at the end (0 exits is the target), the batch done with every item stored once, the
API's answers while full and after (5xx other than 503/507 with Retry-After: target 0), seconds from raising memory
to done.

    .venv/bin/python -m bench.store_full [--items 2000] [--workers 2] [--full-s 60]

Writes bench/results/store_full.json (fake_engine: true) with the machine it ran on.
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
from collections import Counter
from typing import Any

import httpx
from redis import Redis
from redis.exceptions import OutOfMemoryError
from rq import Queue, Worker

from bench.chaos import Poll, Poller, batch_state
from bench.common import COT_PROMPT, build_triples, save, setup_logging, triple_dicts
from bench.fake_worker import FAKE_MODEL_ID
from bench.stack import Stack, service
from juiz.store import Store

log = logging.getLogger("bench.store_full")

NAME = "store_full"
TAG = "full"


class Submitter(threading.Thread):
    """POST a one-item batch every `every_s`, recording each answer."""

    def __init__(self, stack: Stack, every_s: float) -> None:
        super().__init__(daemon=True)
        self.url = f"{stack.url}/v1/batches"
        self.headers = {"Authorization": f"Bearer {stack.api_key}"}
        self.every_s = every_s
        self.posts: list[Poll] = []
        self.halt = threading.Event()

    def run(self) -> None:
        n = 0
        with httpx.Client(timeout=10, headers=self.headers) as http:
            while not self.halt.is_set():
                sent = time.time()
                item = {"id": f"post-{n}", "question": f"q {n}", "answer": "a"}
                n += 1
                try:
                    response = http.post(self.url, json={"items": [item], "options": {"prompt": COT_PROMPT}})
                    status: int | None = response.status_code
                    poll = Poll(sent, time.time(), status, None, "retry-after" in response.headers)
                except httpx.HTTPError as exc:
                    poll = Poll(sent, time.time(), None, type(exc).__name__)
                self.posts.append(poll)
                self.halt.wait(self.every_s)


def fill(redis: Redis) -> int:
    written = 0
    try:
        while True:
            redis.set(f"ballast:{time.monotonic_ns()}", b"x" * 4096)
            written += 1
    except OutOfMemoryError:
        return written


def answers(polls: list[Poll], start: float, end: float) -> dict[str, Any]:
    mine = [p for p in polls if start <= p.sent < end]
    bad = [
        p for p in mine if p.status is not None and p.status >= 500 and not (p.status in (503, 507) and p.retry_after)
    ]
    return {
        "requests": len(mine),
        "by_status": dict(sorted(Counter(str(p.status or p.error) for p in mine).items())),
        "5xx_other_than_503_507_with_retry_after": len(bad),
        "no_answer": sum(1 for p in mine if p.status is None),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.store_full", description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--full-after", type=float, default=0.1, help="fraction of the batch done before it fills")
    parser.add_argument("--full-s", type=float, default=60.0)
    parser.add_argument("--poll-ms", type=float, default=100.0)
    parser.add_argument("--post-s", type=float, default=2.0)
    parser.add_argument("--call-s", type=float, default=0.5, help="FAKE engine: fixed seconds per call")
    parser.add_argument("--item-s", type=float, default=0.02, help="FAKE engine: seconds per item")
    parser.add_argument("--timeout-s", type=float, default=600)
    args = parser.parse_args(argv)
    setup_logging()
    env = {
        "JUIZ_FAKE_CALL_S": str(args.call_s),
        "JUIZ_FAKE_ITEM_S": str(args.item_s),
        "JUIZ_RESULT_CACHE": "false",
        "JUIZ_JOB_TIMEOUT_S": "900",
        "JUIZ_RATE_LIMIT_PER_MINUTE": "100000",  # on: its INCR is a write a full Redis refuses
    }
    items = triple_dicts(build_triples(args.items, TAG))
    with service(NAME, FAKE_MODEL_ID, fake=True, env=env, workers=args.workers) as stack:
        settings = stack.settings
        admin = Redis.from_url(stack.redis_url)
        with stack.client() as client:
            view = client.submit(items, options={"prompt": COT_PROMPT})
        batch_id = view.id
        poller, submitter = Poller(stack, batch_id, args.poll_ms / 1000), Submitter(stack, args.post_s)
        poller.start()
        submitter.start()
        try:
            while batch_state(stack.redis_url, settings, batch_id)[1] < args.full_after * args.items:
                stack.check()
                time.sleep(0.1)
            used = int(admin.info("memory")["used_memory"])
            admin.config_set("maxmemory-policy", "noeviction")
            admin.config_set("maxmemory", str(used))
            full_at = time.time()
            done_when_full = batch_state(stack.redis_url, settings, batch_id)[1]
            ballast = 0
            while time.time() < full_at + args.full_s:
                ballast += fill(admin)
                stack.check()  # a worker that exited ends the run here
                time.sleep(0.2)
            done_before_raise = batch_state(stack.redis_url, settings, batch_id)[1]
            admin.config_set("maxmemory", "0")
            raised_at = time.time()
            deadline = time.monotonic() + args.timeout_s
            while not batch_state(stack.redis_url, settings, batch_id)[0] and time.monotonic() < deadline:
                stack.check()
                time.sleep(0.2)
            time.sleep(1.0)
        finally:
            poller.halt.set()
            submitter.halt.set()
            poller.join(timeout=15)
            submitter.join(timeout=15)
        ended = time.time()
        store = Store(admin, settings)
        record = store.get_batch(batch_id)
        assert record is not None
        results = store.results_in_input_order(batch_id)
        ids = Counter(j.id for j in results)
        expected = {item["id"] for item in items}
        alive = [c.name for c in stack.children if c.name.startswith("worker") and c.process.poll() is None]
        registered = Worker.count(queue=Queue(settings.queue, connection=admin))
        admin.close()
        stack.check()

    polls, posts = poller.polls, submitter.posts
    figures = {
        "batch_status": record.status.value,
        "batch_done": record.status.value == "done" and record.counts.done == record.total,
        "items": args.items,
        "results_stored": len(results),
        "missing": len(expected - set(ids)),
        "stored_twice": sum(1 for n in ids.values() if n > 1),
        "done_when_full": done_when_full,
        "done_before_memory_raised": done_before_raise,
        "ballast_writes": ballast,
        "full_seconds": round(raised_at - full_at, 1),
        "seconds_memory_raised_to_done": round((record.finished_at or ended) - raised_at, 2),
        "workers_alive": len(alive),
        "workers_registered": registered,
        "polls_while_full": answers(polls, full_at, raised_at),
        "polls_after": answers(polls, raised_at, ended),
        "posts_while_full": answers(posts, full_at, raised_at),
        "posts_after": answers(posts, raised_at, ended),
    }
    bad = sum(
        figures[k]["5xx_other_than_503_507_with_retry_after"] for k in figures if k.startswith(("polls", "posts"))
    )
    ok = {
        "batch_done": figures["batch_done"],
        "every_item_once": figures["missing"] == 0 and figures["stored_twice"] == 0 and len(results) == args.items,
        "no_worker_exit": len(alive) == args.workers and registered == args.workers,
        "no_5xx_but_503_507_with_retry_after": bad == 0,
    }
    for key, value in figures.items():
        print(f"{key}: {value}")
    print("targets: " + ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in ok.items()))
    payload = {
        "fake_engine": True,
        "engine": FAKE_MODEL_ID,
        "fake_costs_s": {"call": args.call_s, "item": args.item_s},
        "full": "maxmemory = used_memory at 10 % done, noeviction, ballast written until refused every 0.2 s",
        **figures,
        "targets_met": ok,
        "load_average_1min_at_end": round(os.getloadavg()[0], 2),
    }
    print(f"written: {save(NAME, payload)}")
    return 0 if all(ok.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
