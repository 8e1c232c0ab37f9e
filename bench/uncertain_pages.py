"""Bounded work per request (issue 17's third "done when") — a FAKE engine, no model.

A private stack (redis-server, `juiz serve`, one `bench.fake_worker` at no cost per call, so grading is quick). Tenant
`bench` submits a --items (10,000)-item batch and waits for it; tenant `other` submits an 8-item batch of its own.
Then, in one run, for each page size in --limits (100, the API's default, and 1,000, its largest):

  quiet   `other` polls GET /v1/batches/{its id} every --poll-ms (100) ms for --seconds, alone
  loaded  the same poller, while --clients (20) clients request GET /v1/batches/{id}/results?order=uncertain pages
          of the 10k batch back to back (closed loop, random cursors), for --seconds

Figures: the API process's RSS (VmRSS from /proc, every 50 ms) before, at its peak and 2 s after the load, and its
growth; the pages' p50/p99 and pages/s; the other tenant's poll p50/p99 quiet and loaded (and loaded ÷ quiet). The
load generator shares the two cores with the API; CPU seconds per process are recorded (and --nice raises the
stack's priority over unrelated work on a shared machine, as in bench.api_only). Targets: RSS growth < 100 MiB,
the other tenant's poll p99 < 100 ms under the load.

    .venv/bin/python -m bench.uncertain_pages [--items 10000] [--clients 20] [--limits 100,1000] [--seconds 15]

Writes bench/results/uncertain_pages.json (fake_engine: true) with the machine it ran on.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import secrets
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from bench.api_only import latency_stats
from bench.common import COT_PROMPT, add_nice_flag, build_triples, save, setup_logging, triple_dicts
from bench.fake_worker import FAKE_MODEL_ID
from bench.stack import Stack, service
from juiz.clients.http import JuizClient

log = logging.getLogger("bench.uncertain_pages")

NAME = "uncertain_pages"
TARGETS = {"rss_growth_mib": 100.0, "other_poll_p99_ms": 100.0}
MIB = 1024 * 1024


def rss_bytes(pid: int) -> int:
    """VmRSS of the process and its children (uvicorn serves in one process; counted whole in case it forks)."""
    try:
        process = psutil.Process(pid)
        return int(sum(p.memory_info().rss for p in [process, *process.children(recursive=True)]))
    except psutil.Error:
        return 0


class RssSampler(threading.Thread):
    def __init__(self, pid: int, every_s: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.pid, self.every_s = pid, every_s
        self.peak = rss_bytes(pid)
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(self.every_s):
            self.peak = max(self.peak, rss_bytes(self.pid))


async def load(
    stack: Stack,
    other_key: str,
    other_id: str,
    big_id: str,
    total: int,
    clients: int,
    limit: int,
    seconds: float,
    poll_s: float,
) -> dict[str, Any]:
    """The other tenant's poller, and `clients` closed-loop readers of order=uncertain pages (none when 0)."""
    polls: list[float] = []
    pages: list[float] = []
    errors: dict[str, int] = {}
    deadline = time.perf_counter() + seconds

    def error(kind: str) -> None:
        errors[kind] = errors.get(kind, 0) + 1

    async def poller() -> None:
        url = f"{stack.url}/v1/batches/{other_id}"
        headers = {"Authorization": f"Bearer {other_key}"}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            async with http.get(url, headers=headers) as response:  # untimed: opens the connection
                await response.read()
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                try:
                    async with http.get(url, headers=headers) as response:
                        await response.read()
                    polls.append(time.perf_counter() - started)
                    if response.status != 200:
                        error(f"poll {response.status}")
                except (aiohttp.ClientError, TimeoutError) as exc:
                    error(f"poll {type(exc).__name__}")
                await asyncio.sleep(max(0.0, poll_s - (time.perf_counter() - started)))

    async def reader(rng: random.Random) -> None:
        url = f"{stack.url}/v1/batches/{big_id}/results"
        headers = {"Authorization": f"Bearer {stack.api_key}"}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:
            while time.perf_counter() < deadline:
                cursor = str(rng.randrange(max(1, total // limit)) * limit)
                started = time.perf_counter()
                try:
                    params = {"order": "uncertain", "limit": str(limit), "cursor": cursor}
                    async with http.get(url, headers=headers, params=params) as response:
                        body = await response.read()
                    pages.append(time.perf_counter() - started)
                    if response.status != 200:
                        error(f"page {response.status}")
                    elif body.count(b'"question"') != min(limit, total - int(cursor)):
                        error("page short")
                except (aiohttp.ClientError, TimeoutError) as exc:
                    error(f"page {type(exc).__name__}")

    started = time.perf_counter()
    await asyncio.gather(poller(), *(reader(random.Random(n)) for n in range(clients)))
    elapsed = time.perf_counter() - started
    return {
        "seconds": round(elapsed, 2),
        "other_poll": latency_stats(polls),
        "pages": {**latency_stats(pages), "per_s": round(len(pages) / elapsed, 1)} if clients else None,
        "errors": errors,
    }


def phase(stack: Stack, api_pid: int, clients: int, **kwargs: Any) -> dict[str, Any]:
    cpu_before = stack.cpu_seconds()
    own_before = time.process_time()
    before = rss_bytes(api_pid)
    sampler = RssSampler(api_pid)
    sampler.start()
    result = asyncio.run(load(stack, clients=clients, **kwargs))
    sampler.halt.set()
    sampler.join()
    time.sleep(2.0)
    after = rss_bytes(api_pid)
    cpu_after = stack.cpu_seconds()
    result["clients"] = clients
    result["api_rss_mib"] = {
        "before": round(before / MIB, 1),
        "peak": round(max(sampler.peak, after) / MIB, 1),
        "after_2s": round(after / MIB, 1),
        "growth_peak": round((max(sampler.peak, after) - before) / MIB, 1),
        "growth_kept": round((after - before) / MIB, 1),
    }
    result["cpu_seconds"] = {
        **{name: round(cpu_after[name] - cpu_before[name], 2) for name in cpu_after},
        "load generator": round(time.process_time() - own_before, 2),
    }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.uncertain_pages", description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--limits", default="100,1000", help="page sizes, each its own quiet/loaded pair")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--poll-ms", type=float, default=100.0)
    add_nice_flag(parser)
    args = parser.parse_args(argv)
    setup_logging()
    other_key = secrets.token_urlsafe(16)
    env = {"JUIZ_FAKE_CALL_S": "0", "JUIZ_FAKE_ITEM_S": "0", "JUIZ_RESULT_CACHE": "false"}
    limits = [int(x) for x in args.limits.split(",")]
    runs: dict[str, dict[str, Any]] = {}
    with service(NAME, FAKE_MODEL_ID, fake=True, env=env, api_keys=f"other:{other_key}") as stack:
        if args.nice:
            for pid in [os.getpid(), *(c.process.pid for c in stack.children)]:
                os.setpriority(os.PRIO_PROCESS, pid, args.nice)
        options = {"prompt": COT_PROMPT}  # CoT: the FAKE engine's digits give results uncertainties that differ
        started = time.perf_counter()
        with stack.client() as client:
            big = client.submit(triple_dicts(build_triples(args.items, "unc")), options=options)
            client.wait(big.id, poll_s=0.5, timeout_s=1800)
        graded_s = time.perf_counter() - started
        with JuizClient(stack.url, api_key=other_key, timeout_s=600) as other:
            small = other.submit(triple_dicts(build_triples(8, "other")), options=options)
            other.wait(small.id, poll_s=0.2, timeout_s=600)
        api_pid = next(c.process.pid for c in stack.children if c.name == "API")
        common = {
            "other_key": other_key,
            "other_id": small.id,
            "big_id": big.id,
            "total": args.items,
            "seconds": args.seconds,
            "poll_s": args.poll_ms / 1000,
        }
        for limit in limits:
            quiet = phase(stack, api_pid, 0, limit=limit, **common)
            loaded = phase(stack, api_pid, args.clients, limit=limit, **common)
            q99, l99 = quiet["other_poll"]["p99_ms"], loaded["other_poll"]["p99_ms"]
            runs[str(limit)] = {
                "quiet": quiet,
                "loaded": loaded,
                "other_poll_p99_loaded_over_quiet": round(l99 / q99, 2) if q99 and l99 else None,
                "targets_met": {
                    "rss_growth": loaded["api_rss_mib"]["growth_peak"] < TARGETS["rss_growth_mib"],
                    "other_poll_p99": (l99 or 0) < TARGETS["other_poll_p99_ms"],
                    "no_errors": not loaded["errors"] and not quiet["errors"],
                },
            }
            log.info("limit %d: %s", limit, runs[str(limit)]["targets_met"])
        stack.check()

    print(f"\norder=uncertain pages — FAKE ENGINE, {args.items}-item batch, {args.clients} concurrent readers")
    for limit, r in runs.items():
        q, ld = r["quiet"], r["loaded"]
        print(
            f"limit {limit}: pages p50 {ld['pages']['p50_ms']} ms p99 {ld['pages']['p99_ms']} ms "
            f"({ld['pages']['per_s']}/s); API RSS {ld['api_rss_mib']['before']} → peak {ld['api_rss_mib']['peak']} "
            f"MiB (+{ld['api_rss_mib']['growth_peak']}, kept +{ld['api_rss_mib']['growth_kept']}); other tenant's "
            f"poll p50/p99 quiet {q['other_poll']['p50_ms']}/{q['other_poll']['p99_ms']} ms, loaded "
            f"{ld['other_poll']['p50_ms']}/{ld['other_poll']['p99_ms']} ms "
            f"(×{r['other_poll_p99_loaded_over_quiet']}); errors {ld['errors'] or 0}; "
            + ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in r["targets_met"].items())
        )
    payload = {
        "fake_engine": True,
        "engine": FAKE_MODEL_ID,
        "items": args.items,
        "clients": args.clients,
        "graded_seconds_fake_engine": round(graded_s, 1),
        "runs": runs,
        "targets": TARGETS,
        "nice": args.nice,
        "load_average_1min_at_end": round(os.getloadavg()[0], 2),
        "api_log": str(Path("bench/work") / NAME / "api.log"),
    }
    print(f"written: {save(NAME, payload)}")
    return 0 if all(all(r["targets_met"].values()) for r in runs.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
