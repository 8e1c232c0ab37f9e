"""Scale-out and recovery of the worker fleet — a FAKE engine with a GPU-like cost, no model.

A private redis-server and W worker PROCESSES (`bench.fake_worker`: the real worker loop `workers.worker.run`, RQ,
claims, coalescing, storage) whose FAKE engine costs --call-s per call plus --item-s per item (slept). Default
settings otherwise (coalesce_max_items 256, chunk_size 32, gather_s 0.5), the result cache off so every item is
graded. For W in --workers, fresh workers each time:

  single  one batch of --single-items (256) items submitted to idle workers
  backlog --batches (8) batches × --batch-items (128) items queued while every worker is busy (the issue's case)
  deep    the same with two full calls per worker: W × 2 × 256 items in batches of 128

A backlog is queued while the workers are held in a call (a FAKE call that waits for a key, at no cost), then timed
from their release: that is a backlog. Submitted to idle workers instead, the first batch is split between them
before the others arrive (see workers.jobs: gather_quiet_s lets a burst settle first, as far as timing allows).

Throughput = items / (last batch finished − submission); speed-up = throughput / W=1's. What "ideal" means: with a
fixed cost per call, the fastest any scheduler can go is each worker grading an equal share n/W in the fewest calls
of at most M=256 items: T(W) = ceil(n / (W·M))·call_s + (n/W)·item_s. So one 256-item batch on 8 workers can't
be 8× faster (8 calls of 32 items, each paying the fixed cost: ideal 2.7×), and neither can the 8×128 backlog
(8 calls of 128: ideal 6.2×); a deep backlog can (ideal W×). Efficiency = speed-up / ideal speed-up; the target is
≥ 0.9.

Recovery: two workers share a 64-item batch; one of them, whose engine calls take 600 s, is SIGKILLed mid-call.
Figures: seconds from the kill to the other worker's engine call on the killed worker's items starting (taken
over), and to the batch being done; every item stored exactly once is checked. Before timing, every worker makes
one call (its first job imports what the judge needs: start-up, not throughput).

    .venv/bin/python -m bench.scale_out [--workers 1,2,4,8] [--call-s 1] [--item-s 0.01] [--repeat 1]

Writes bench/results/scale_out.json (marked fake_engine: true) with the machine it ran on.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import psutil
from redis import Redis
from rq import Queue, Worker

from bench.common import COT_PROMPT, build_triples, save, setup_logging, table
from bench.fake_worker import CALLS_KEY, HOLD_MARKER, RELEASE_KEY
from juiz.runtime.processes import private_redis
from juiz.runtime.settings import ENV_PREFIX, Settings
from juiz.store import Store
from schemas import BatchOptions

log = logging.getLogger("bench.scale_out")

NAME = "scale_out"
REPO = Path(__file__).resolve().parent.parent
TARGET_EFFICIENCY = 0.9


def ideal_seconds(n: int, workers: int, call_s: float, item_s: float, max_items: int) -> float:
    """The least time W workers need for n items: equal shares, each in the fewest calls of at most max_items."""
    share = n / workers
    return math.ceil(share / max_items) * call_s + share * item_s


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 900) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Fleet:
    """Worker processes on the FAKE engine, all stopped on exit."""

    def __init__(self, settings: Settings, workdir: Path, call_s: float, item_s: float) -> None:
        self.env = {
            **os.environ,
            **{
                ENV_PREFIX + k.upper(): str(v)
                for k, v in settings.model_dump(mode="json").items()
                if k != "api_keys" and v is not None  # unset stays unset
            },
            "JUIZ_FAKE_CALL_S": str(call_s),
            "JUIZ_FAKE_ITEM_S": str(item_s),
            "JUIZ_FAKE_EVENTS": "1",
        }
        self.workdir = workdir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, **env: str) -> subprocess.Popen[bytes]:
        log_path = self.workdir / f"worker-{len(self.procs)}.log"
        with open(log_path, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "bench.fake_worker"],
                cwd=REPO,
                env={**self.env, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = []


@contextmanager
def fleet(settings: Settings, workdir: Path, call_s: float, item_s: float) -> Iterator[Fleet]:
    f = Fleet(settings, workdir, call_s, item_s)
    try:
        yield f
    finally:
        f.stop()


def registered(redis: Redis, queue: str) -> int:
    """Workers registered for the queue, by RQ's API."""
    return Worker.count(queue=Queue(queue, connection=redis))


def warm_up(store: Store, fleet: Fleet) -> None:
    """Until every worker has made an engine call: a worker's first job imports what the judge needs (seconds of
    CPU, all workers at once on a small machine), which is start-up, not throughput."""
    redis = store.redis
    pids = {p.pid for p in fleet.procs}
    for attempt in range(20):
        seen = {json.loads(c)["pid"] for c in redis.lrange(CALLS_KEY, 0, -1)}
        if pids <= seen:
            return
        batch, _ = store.create_batch(
            "bench", BatchOptions(prompt=COT_PROMPT), build_triples(32 * len(pids), f"warm-{attempt}")
        )
        wait_for(lambda b=batch.id: (r := store.get_batch(b)) is not None and r.terminal, "warm-up")  # type: ignore[misc]
    raise RuntimeError("some workers never got a job during warm-up")


def hold_all(store: Store, fleet: Fleet) -> None:
    """Keep every worker in an engine call that waits for RELEASE_KEY: the backlog is then queued as a whole, as it
    is when work piles up, rather than trickling in while idle workers split its first batch."""
    redis = store.redis
    redis.delete(RELEASE_KEY)
    pids = {p.pid for p in fleet.procs}

    def held() -> set[int]:
        return {c["pid"] for c in map(json.loads, redis.lrange(CALLS_KEY, 0, -1)) if "hold" in c}

    holds: list[str] = []
    for attempt in range(20):
        waiting = pids - held()
        if not waiting:
            # What no worker took of the hold batches must not mix with the backlog: cancel them (the held calls'
            # results are refused too).
            for batch_id in holds:
                record = store.get_batch(batch_id)
                if record is not None:
                    store.cancel_batch(record)
            return
        items = build_triples(32 * len(waiting), f"hold-{attempt}")
        items = [t.model_copy(update={"question": f"{HOLD_MARKER} {t.question}"}) for t in items]
        before = len(held())  # counted before the hold batch exists
        holds.append(store.create_batch("bench-hold", BatchOptions(prompt=COT_PROMPT), items)[0].id)
        wait_for(partial(lambda n: len(held()) > n or pids <= held(), before), "a worker to take the hold")
    raise RuntimeError("could not hold every worker")


def cpu_seconds(fleet: Fleet) -> float:
    """User + system CPU seconds the worker processes have used so far."""
    total = 0.0
    for proc in fleet.procs:
        try:
            times = psutil.Process(proc.pid).cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def run_case(store: Store, batches: list[int], tag: str, hold: Fleet | None = None) -> tuple[float, int, list[int]]:
    """Submit the batches together (with `hold`: while every worker is busy, then release them); seconds until
    the last one is finished, items, and the engine calls' sizes."""
    redis = store.redis
    redis.delete(CALLS_KEY)
    if hold is not None:
        hold_all(store, hold)
    options = BatchOptions(prompt=COT_PROMPT)
    triples = [build_triples(n, f"{tag}-{b}") for b, n in enumerate(batches)]
    started = time.time()
    ids = [store.create_batch("bench", options, items)[0].id for items in triples]
    if hold is not None:
        started = time.time()
        redis.set(RELEASE_KEY, 1)

    def finished() -> bool:
        return all((b := store.get_batch(i)) is not None and b.terminal for i in ids)

    wait_for(finished, f"case {tag}")
    records = [store.get_batch(i) for i in ids]
    end = max(r.finished_at or 0.0 for r in records if r is not None)
    for r in records:
        assert r is not None and r.counts.done == r.total, f"batch {r and r.id} incomplete"
        assert store.result_count(r.id) == r.total, f"batch {r.id}: results stored more than once"
    calls = [json.loads(c) for c in redis.lrange(CALLS_KEY, 0, -1)]
    sizes = sorted((c["n"] for c in calls if "end" in c), reverse=True)
    return end - started, sum(batches), sizes


def measure_recovery(settings: Settings, workdir: Path, url: str, call_s: float, item_s: float) -> dict[str, Any]:
    redis = Redis.from_url(url)
    redis.flushdb()
    store = Store(redis, settings)

    def calls() -> list[dict[str, Any]]:
        return [json.loads(c) for c in redis.lrange(CALLS_KEY, 0, -1)]

    with fleet(settings, workdir, call_s, item_s) as f:
        survivor = f.start()
        wait_for(lambda: registered(redis, settings.queue) == 1, "the survivor")
        warm_up(store, f)
        doomed = f.start(JUIZ_FAKE_CALL_S="600")  # its calls take far longer than any TTL
        wait_for(lambda: registered(redis, settings.queue) == 2, "the doomed worker")
        redis.delete(CALLS_KEY)
        batch, _ = store.create_batch("bench", BatchOptions(prompt=COT_PROMPT), build_triples(64, "recovery"))
        wait_for(lambda: any(c["pid"] == doomed.pid for c in calls()), "the doomed worker's call")
        killed_at = time.time()
        doomed.send_signal(signal.SIGKILL)
        doomed.wait()

        def taken_over() -> list[dict[str, Any]]:
            return [c for c in calls() if c["pid"] == survivor.pid and "end" not in c and c["start"] > killed_at]

        wait_for(lambda: bool(taken_over()), "the survivor to take the killed worker's chunks over")
        takeover = taken_over()[0]
        wait_for(lambda: (b := store.get_batch(batch.id)) is not None and b.terminal, "the batch")
        done = store.get_batch(batch.id)
        assert done is not None
        stored = store.result_count(batch.id)
        assert stored == 64 and done.counts.done == 64, f"{stored} results stored for 64 items"
    redis.close()
    return {
        "items": 64,
        "killed_call_s": 600,
        "items_taken_over": takeover["n"],
        "kill_to_takeover_s": round(takeover["start"] - killed_at, 2),
        "kill_to_done_s": round((done.finished_at or 0) - killed_at, 2),
        "stored_exactly_once": True,
        "heartbeat_ttl_s": settings.heartbeat_ttl_s,
        "maintenance_interval_s": settings.maintenance_interval_s,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale_out", description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--call-s", type=float, default=1.0, help="FAKE engine: fixed seconds per call")
    parser.add_argument("--item-s", type=float, default=0.01, help="FAKE engine: seconds per item")
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--batch-items", type=int, default=128)
    parser.add_argument("--single-items", type=int, default=256)
    parser.add_argument("--no-recovery", action="store_true")
    parser.add_argument("--repeat", type=int, default=1, help="runs per case; the fastest is kept (a busy machine)")
    args = parser.parse_args(argv)
    setup_logging()
    # SIGTERM unwinds like an error, so the worker processes and redis-server are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    counts = [int(w) for w in args.workers.split(",")]
    load_before = os.getloadavg()

    with (
        tempfile.TemporaryDirectory(prefix="juiz-scale-") as tmp,
        private_redis(Path(tmp), dict(os.environ)) as (
            url,
            _,
        ),
    ):
        workdir = Path(tmp)
        settings = Settings.from_env({}, redis_url=url, result_cache=False, log_level="WARNING")
        redis = Redis.from_url(url)
        store = Store(redis, settings)
        m = settings.coalesce_max_items
        cases: dict[str, dict[str, dict[str, Any]]] = {"single": {}, "backlog": {}, "deep": {}}
        for w in counts:
            redis.flushdb()
            with fleet(settings, workdir, args.call_s, args.item_s) as f:
                for _ in range(w):
                    f.start()
                wait_for(lambda: registered(redis, settings.queue) == len(f.procs), f"{w} workers")
                warm_up(store, f)
                plans = {
                    "single": [args.single_items],
                    "backlog": [args.batch_items] * args.batches,
                    "deep": [128] * (w * 2 * m // 128),
                }
                for case, batches in plans.items():
                    runs = []
                    for attempt in range(args.repeat):
                        cpu_before = cpu_seconds(f)
                        hold = None if case == "single" else f
                        seconds, n, sizes = run_case(store, batches, f"{case}-w{w}-{attempt}", hold=hold)
                        runs.append((seconds, n, sizes, cpu_seconds(f) - cpu_before))
                    seconds, n, sizes, cpu = min(runs)  # the least disturbed run on a shared machine
                    ideal = ideal_seconds(n, w, args.call_s, args.item_s, m)
                    cases[case][str(w)] = {
                        "items": n,
                        "seconds": round(seconds, 3),
                        "items_per_s": round(n / seconds, 2),
                        "ideal_seconds": round(ideal, 3),
                        "engine_calls": sizes,
                        # the workers' own CPU (the FAKE engine sleeps): what W workers need from the machine's cores
                        "worker_cpu_ms_per_item": round(1000 * cpu / n, 2),
                    }
                    log.info("%s W=%d: %d items in %.2f s (ideal %.2f), calls %s", case, w, n, seconds, ideal, sizes)
        for per_w in cases.values():
            base = per_w[str(counts[0])]
            for r in per_w.values():
                base_rate = base["items_per_s"] / counts[0]  # per worker of the smallest fleet (1 by default)
                r["speedup"] = round(r["items_per_s"] / base_rate, 2)
                one = ideal_seconds(r["items"], 1, args.call_s, args.item_s, m)
                r["ideal_speedup"] = round(one / r["ideal_seconds"], 2)
                r["efficiency"] = round(r["speedup"] / r["ideal_speedup"], 3)
        recovery = None if args.no_recovery else measure_recovery(settings, workdir, url, args.call_s, args.item_s)
        load_after = os.getloadavg()
        redis.close()

    rows = []
    for case, per_w in cases.items():
        for fleet_size, r in per_w.items():
            rows.append(
                [
                    case,
                    fleet_size,
                    r["items"],
                    r["seconds"],
                    r["items_per_s"],
                    r["speedup"],
                    r["ideal_speedup"],
                    r["efficiency"],
                ]
            )
    print(table(rows, ["case", "W", "items", "s", "items/s", "speed-up", "ideal", "efficiency"]))
    if recovery:
        print(
            f"recovery after SIGKILL mid-call (a 600 s call): taken over in {recovery['kill_to_takeover_s']} s, "
            f"batch done {recovery['kill_to_done_s']} s after the kill, every item stored once"
        )
    save(
        NAME,
        {
            "fake_engine": True,
            "call_s": args.call_s,
            "item_s": args.item_s,
            "coalesce_max_items": settings.coalesce_max_items,
            "chunk_size": settings.chunk_size,
            "gather_s": settings.gather_s,
            "ideal": "T(W) = ceil(n / (W*M)) * call_s + (n/W) * item_s: equal shares in the fewest calls of <= M items",
            "target_efficiency": TARGET_EFFICIENCY,
            "repeat": args.repeat,
            # The workers' own CPU work (prompts, parsing, storage: a few ms per item) shares the machine's cores
            # with everything else running; the load average says how busy it was.
            "load_average_before_after": [round(load_before[0], 1), round(load_after[0], 1)],
            "cases": cases,
            "recovery": recovery,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
