"""API without the engine — a FAKE engine, no model: what the HTTP API and the queue cost on their own.

A private stack: redis-server, `juiz serve` (uvicorn, one process) and one worker running `bench.fake_worker`, the
real worker code with a FAKE engine (every result it stores names the fake as its model). Then:

  1. POST /v1/batches with 10,000 items (one JSON body, serialised beforehand) → seconds to the 202;
  2. 50 concurrent clients poll GET /v1/batches/{id} for 30 s while the worker grades (a bounded load generator:
     asyncio + aiohttp, 127.0.0.1 only, one connection per client, a pause of --think-ms between a client's
     polls, 0.5–1.5× at random so the clients do not march in step) → p50/p99/max latency, requests/s, errors
     (anything but a 200, or no answer);
  3. once graded, every result paged with GET /v1/batches/{id}/results → seconds to read all 10,000;
  4. mixed load (issue 10): a second batch of as many items is submitted and, while the worker grades it, 50 clients
     for 30 s: half poll that batch, half read 100-item result pages of the first one (random cursors) → p50/p99
     per kind, errors.

The FAKE engine is given a cost (JUIZ_FAKE_CALL_S per call + JUIZ_FAKE_ITEM_S per item, --call-ms/--item-ms) so
that grading lasts through the load, as it would on a GPU, instead of finishing in a few seconds. Rate limiting
stays on (a limit no client reaches), so its Redis round trip is part of every measured request.

Targets: POST < 1 s, poll p99 < 50 ms, mixed p99 < 100 ms per kind, 0 errors. Writes bench/results/api_only.json
(marked fake_engine: true).

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

from bench.common import COT_PROMPT, add_nice_flag, build_triples, save, setup_logging, triple_dicts
from bench.fake_worker import FAKE_MODEL_ID
from bench.stack import Stack, service

log = logging.getLogger("bench.api_only")

NAME = "api_only"
TARGETS = {"post_seconds": 1.0, "poll_p99_ms": 50.0, "poll_errors": 0, "mixed_p99_ms": 100.0, "mixed_errors": 0}
MAX_PAGE = 1000  # the API's largest page (service.controllers.batches.MAX_PAGE)
MIXED_PAGE = 100


def post_batch(stack: Stack, items: list[dict[str, Any]]) -> tuple[float, str, int]:
    body = json.dumps({"items": items, "options": {"prompt": COT_PROMPT}}, ensure_ascii=False).encode()
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


async def mixed_load(
    stack: Stack, graded_id: str, total: int, running_id: str, clients: int, seconds: float, think_s: float
) -> dict[str, Any]:
    """Half the clients poll the batch being graded, half read random 100-item pages of a finished one."""
    samples: dict[str, list[float]] = {"poll": [], "page": []}
    errors: dict[str, int] = {}
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    poll_url = f"{stack.url}/v1/batches/{running_id}"
    page_url = f"{stack.url}/v1/batches/{graded_id}/results"
    pages = max(1, total // MIXED_PAGE)
    deadline = 0.0

    async def one_client(kind: str, rng: random.Random) -> None:
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=10)) as http:

            def request() -> Any:
                if kind == "poll":
                    return http.get(poll_url, headers=headers)
                cursor = str(rng.randrange(pages) * MIXED_PAGE)
                return http.get(page_url, headers=headers, params={"cursor": cursor, "limit": str(MIXED_PAGE)})

            async with request() as response:  # untimed: opens this client's connection
                await response.read()
            await asyncio.sleep(rng.uniform(0, think_s))
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                try:
                    async with request() as response:
                        body = await response.read()
                    samples[kind].append(time.perf_counter() - started)
                    if response.status != 200:
                        errors[f"{kind} {response.status}"] = errors.get(f"{kind} {response.status}", 0) + 1
                    elif kind == "page" and body.count(b'"question"') != MIXED_PAGE:
                        errors["page not full"] = errors.get("page not full", 0) + 1
                except (aiohttp.ClientError, TimeoutError) as exc:
                    errors[f"{kind} {type(exc).__name__}"] = errors.get(f"{kind} {type(exc).__name__}", 0) + 1
                if think_s:
                    await asyncio.sleep(think_s * rng.uniform(0.5, 1.5))

    started = time.perf_counter()
    deadline = started + seconds
    kinds = ["poll" if n % 2 == 0 else "page" for n in range(clients)]
    await asyncio.gather(*(one_client(kind, random.Random(n)) for n, kind in enumerate(kinds)))
    elapsed = time.perf_counter() - started
    total_requests = sum(len(v) for v in samples.values()) + sum(errors.values())
    return {
        "clients": clients,
        "pollers": kinds.count("poll"),
        "page_readers": kinds.count("page"),
        "page_size": MIXED_PAGE,
        "seconds": round(elapsed, 2),
        "think_ms": think_s * 1000,
        "requests_per_s": round(total_requests / elapsed, 1),
        "poll": latency_stats(samples["poll"]),
        "page": latency_stats(samples["page"]),
        "errors": sum(errors.values()),
        "errors_by_kind": errors,
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
    parser.add_argument("--call-ms", type=float, default=200.0, help="FAKE engine: cost of one call")
    parser.add_argument("--item-ms", type=float, default=3.0, help="FAKE engine: cost of each item in a call")
    add_nice_flag(parser)
    args = parser.parse_args(argv)
    setup_logging()
    items = triple_dicts(build_triples(args.items, "api"))
    env = {
        "JUIZ_FAKE_CALL_S": str(args.call_ms / 1000),
        "JUIZ_FAKE_ITEM_S": str(args.item_ms / 1000),
        "JUIZ_RATE_LIMIT_PER_MINUTE": "10000000",  # on, so its cost is measured; never reached
    }
    with service(NAME, FAKE_MODEL_ID, fake=True, env=env) as stack:
        if args.nice:
            for pid in [os.getpid(), *(c.process.pid for c in stack.children)]:
                os.setpriority(os.PRIO_PROCESS, pid, args.nice)
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
        # Other questions, so the worker grades them instead of answering from the result cache.
        second_items = [
            {**item, "id": f"mixed-{item['id']}", "question": f"{item['question']} (again)"} for item in items
        ]
        _, running_id, _ = post_batch(stack, second_items)
        cpu_before = stack.cpu_seconds()
        mixed = asyncio.run(
            mixed_load(stack, batch_id, args.items, running_id, args.clients, args.seconds, args.think_ms / 1000)
        )
        cpu_after = stack.cpu_seconds()
        mixed["cpu_seconds"] = {name: round(cpu_after[name] - cpu_before[name], 2) for name in cpu_after}
        # Load-independent: what one request costs the API process, whatever else the machine is running.
        answered = (mixed["poll"]["requests"] or 0) + (mixed["page"]["requests"] or 0)
        mixed["api_cpu_ms_per_request"] = round(1000 * mixed["cpu_seconds"]["API"] / max(answered, 1), 3)
        with stack.client() as client:
            running_view = client.batch(running_id)
            client.cancel(running_id)  # it only had to keep the worker busy during the load
        mixed["graded_during_load"] = running_view.counts.done
        mixed["running_batch_status_after"] = running_view.status.value
        log.info("mixed: poll p99 %s ms, page p99 %s ms", mixed["poll"]["p99_ms"], mixed["page"]["p99_ms"])
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
    print(
        f"mixed, {mixed['pollers']} pollers + {mixed['page_readers']} page readers ({MIXED_PAGE} results) for "
        f"{mixed['seconds']}s while the worker grades another {args.items} ({mixed['graded_during_load']} graded): "
        f"poll p50 {mixed['poll']['p50_ms']} ms p99 {mixed['poll']['p99_ms']} ms; page p50 {mixed['page']['p50_ms']} "
        f"ms p99 {mixed['page']['p99_ms']} ms (target < {TARGETS['mixed_p99_ms']}); errors {mixed['errors']}; "
        f"API CPU {mixed['api_cpu_ms_per_request']} ms per request"
    )
    print(f"  machine load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    payload = {
        "fake_engine": True,
        "engine": FAKE_MODEL_ID,
        "items": args.items,
        "body_bytes": body_bytes,
        "post_seconds": round(post_s, 4),
        "polling": load,
        "paging": paging,
        "mixed": mixed,
        "fake_costs_ms": {"call": args.call_ms, "item": args.item_ms},
        "load_average_1min_at_end": round(os.getloadavg()[0], 2),
        "nice": args.nice,
        "batch_status": view.status.value,
        "graded_seconds_fake_engine": round(graded_s, 2) if graded_s else None,
        "targets": TARGETS,
    }
    print(f"written: {save(NAME, payload)}")
    return payload


if __name__ == "__main__":
    main()
