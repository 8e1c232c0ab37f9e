"""API without the engine — a FAKE engine, no model: what the HTTP API and the queue cost on their own.

A private stack: redis-server, `juiz serve` (uvicorn, one process) and one worker running `bench.fake_worker`, the
real worker code with a FAKE engine (every result it stores names the fake as its model). Then:

  1. POST /v1/batches with 10,000 items (one JSON body, serialised beforehand) → seconds to the 202;
  2. 50 concurrent clients poll GET /v1/batches/{id} for 30 s while the worker grades (a bounded load generator:
     asyncio + aiohttp, 127.0.0.1 only, one connection per client, a pause of --think-ms between a client's
     polls, 0.5–1.5× at random so the clients do not march in step) → p50/p99/max latency, requests/s, errors
     (anything but a 200, or no answer);
  3. once graded, every result paged with GET /v1/batches/{id}/results → seconds to read all 10,000.

Targets: POST < 1 s, p99 < 50 ms, 0 errors. Writes bench/results/api_only.json (marked fake_engine: true).

    .venv/bin/python -m bench.api_only [--items 10000] [--clients 50] [--seconds 30] [--think-ms 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import statistics
import time
import uuid
from typing import Any

import aiohttp
import httpx

from bench.common import build_triples, save, setup_logging, triple_dicts
from bench.fake_worker import FAKE_MODEL_ID
from bench.stack import Stack, service

log = logging.getLogger("bench.api_only")

NAME = "api_only"
TARGETS = {"post_seconds": 1.0, "poll_p99_ms": 50.0, "poll_errors": 0}
MAX_PAGE = 1000  # the API's largest page (service.controllers.batches.MAX_PAGE)


def post_batch(stack: Stack, items: list[dict[str, Any]]) -> tuple[float, str, int]:
    body = json.dumps({"items": items, "options": {}}, ensure_ascii=False).encode()
    headers = {
        "Authorization": f"Bearer {stack.api_key}",
        "Content-Type": "application/json",
        "Idempotency-Key": uuid.uuid4().hex,
    }
    with httpx.Client(timeout=120) as http:
        started = time.perf_counter()
        response = http.post(f"{stack.url}/v1/batches", content=body, headers=headers)
        seconds = time.perf_counter() - started
    response.raise_for_status()
    return seconds, response.json()["id"], len(body)


def latency_stats(latencies: list[float]) -> dict[str, float | int | None]:
    ordered = sorted(latencies)

    def pct(p: float) -> float | None:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000, 2) if ordered else None

    return {
        "requests": len(ordered),
        "p50_ms": pct(0.50),
        "p90_ms": pct(0.90),
        "p99_ms": pct(0.99),
        "max_ms": round(ordered[-1] * 1000, 2) if ordered else None,
        "mean_ms": round(statistics.mean(ordered) * 1000, 2) if ordered else None,
    }


async def poll_load(stack: Stack, batch_id: str, clients: int, seconds: float, think_s: float) -> dict[str, Any]:
    """(wall-clock start, latency) of every answered poll, and the errors; bounded to `seconds`."""
    samples: list[tuple[float, float]] = []
    errors: dict[str, int] = {}
    url = f"{stack.url}/v1/batches/{batch_id}"
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    deadline = 0.0

    async def one_client(rng: random.Random) -> None:
        # aiohttp, not httpx: on two cores the load generator competes with the API it measures, and aiohttp's
        # C parser costs a fraction of httpx's CPU per request.
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=10)) as http:
            async with http.get(url, headers=headers) as response:  # untimed: opens this client's connection
                await response.read()
            # Independent pollers: a random phase, and pauses of 0.5–1.5× think_s, so clients do not march in step.
            await asyncio.sleep(rng.uniform(0, think_s))
            while time.perf_counter() < deadline:
                wall, started = time.time(), time.perf_counter()
                try:
                    async with http.get(url, headers=headers) as response:
                        await response.read()
                    samples.append((wall, time.perf_counter() - started))
                    if response.status != 200:
                        errors[str(response.status)] = errors.get(str(response.status), 0) + 1
                except (aiohttp.ClientError, TimeoutError) as exc:
                    errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                if think_s:
                    await asyncio.sleep(think_s * rng.uniform(0.5, 1.5))

    started = time.perf_counter()
    deadline = started + seconds
    await asyncio.gather(*(one_client(random.Random(seed)) for seed in range(clients)))
    elapsed = time.perf_counter() - started
    total = len(samples) + sum(errors.values())
    return {
        "clients": clients,
        "seconds": round(elapsed, 2),
        "think_ms": think_s * 1000,
        "requests_per_s": round(total / elapsed, 1),
        **latency_stats([latency for _, latency in samples]),
        "requests": total,
        "errors": sum(errors.values()),
        "errors_by_kind": errors,
        "samples": samples,
    }


def split_by_grading(load: dict[str, Any], finished_at: float | None) -> dict[str, Any]:
    """The same polls, split at the moment the worker finished grading: the API shares this machine's two cores
    with the worker (and the load generator), so latency while it grades and once it idles are both worth seeing."""
    samples = load.pop("samples")
    if finished_at is None:
        return {}
    return {
        "while_worker_grades": latency_stats([lat for wall, lat in samples if wall < finished_at]),
        "after_graded": latency_stats([lat for wall, lat in samples if wall >= finished_at]),
    }


def page_all(stack: Stack, batch_id: str, limit: int) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    count, pages, cursor = 0, 0, ""
    with httpx.Client(base_url=stack.url, timeout=120, headers=headers) as http:
        started = time.perf_counter()
        while cursor is not None:
            response = http.get(f"/v1/batches/{batch_id}/results", params={"cursor": cursor, "limit": limit})
            response.raise_for_status()
            page = response.json()
            pages += 1
            count += len(page["items"])
            if not page["items"]:
                break
            cursor = page["next_cursor"]
        seconds = time.perf_counter() - started
    return {"page_size": limit, "pages": pages, "results": count, "seconds": round(seconds, 3)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the pollers run (bounded)")
    parser.add_argument(
        "--think-ms", type=float, default=100.0, help="pause between one client's polls; 0: closed loop"
    )
    args = parser.parse_args(argv)
    setup_logging()
    items = triple_dicts(build_triples(args.items, "api"))
    with service(NAME, FAKE_MODEL_ID, fake=True) as stack:
        post_s, batch_id, body_bytes = post_batch(stack, items)
        log.info("POST %d items: 202 in %.3fs", args.items, post_s)
        cpu_before, own_before = stack.cpu_seconds(), time.process_time()
        load = asyncio.run(poll_load(stack, batch_id, args.clients, args.seconds, args.think_ms / 1000))
        cpu_after, own_after = stack.cpu_seconds(), time.process_time()
        load["cpu_seconds_while_polling"] = {
            **{name: round(cpu_after[name] - cpu_before[name], 2) for name in cpu_after},
            "load generator": round(own_after - own_before, 2),
        }
        log.info("polling: p50 %s ms, p99 %s ms, %d errors", load["p50_ms"], load["p99_ms"], load["errors"])
        with stack.client() as client:
            view = client.wait(batch_id, poll_s=0.5, timeout_s=1800)
        graded_s = (view.finished_at - view.created_at).total_seconds() if view.finished_at else None
        load["phases"] = split_by_grading(load, view.finished_at.timestamp() if view.finished_at else None)
        paging = [page_all(stack, batch_id, MAX_PAGE), page_all(stack, batch_id, 100)]
        stack.check()

    print("\nAPI only — FAKE ENGINE (no model ran; the API, Redis and the worker's queue path alone)")
    print(
        f"POST {args.items} items ({body_bytes / 1e6:.1f} MB): 202 in {post_s:.3f}s "
        f"(target < {TARGETS['post_seconds']} s)"
    )
    print(
        f"{args.clients} clients polling for {load['seconds']}s (pause {args.think_ms:.0f} ms): "
        f"{load['requests']} requests, {load['requests_per_s']}/s, p50 {load['p50_ms']} ms, p99 {load['p99_ms']} ms "
        f"(target < {TARGETS['poll_p99_ms']}), max {load['max_ms']} ms, errors {load['errors']} (target 0)"
    )
    print(
        f"  CPU seconds used while polling ({load['seconds']}s on {os.cpu_count()} cores): "
        + ", ".join(f"{k} {v}" for k, v in load["cpu_seconds_while_polling"].items())
    )
    for phase, stats in load["phases"].items():
        print(f"  {phase}: {stats['requests']} polls, p50 {stats['p50_ms']} ms, p99 {stats['p99_ms']} ms")
    for p in paging:
        print(f"paging all {p['results']} results, {p['page_size']} per page: {p['seconds']}s in {p['pages']} pages")
    print(f"graded by the FAKE worker in {graded_s:.1f}s after creation ({view.status.value})" if graded_s else "")
    payload = {
        "fake_engine": True,
        "engine": FAKE_MODEL_ID,
        "items": args.items,
        "body_bytes": body_bytes,
        "post_seconds": round(post_s, 4),
        "polling": load,
        "paging": paging,
        "batch_status": view.status.value,
        "graded_seconds_fake_engine": round(graded_s, 2) if graded_s else None,
        "targets": TARGETS,
    }
    print(f"written: {save(NAME, payload)}")
    return payload


if __name__ == "__main__":
    main()
