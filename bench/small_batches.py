"""Many small batches: 8 clients each submitting an 8-item batch at once vs one 64-item batch, through the service.

One private stack (Redis, `juiz serve`, ONE `juiz worker` on the model), warmed up with a batch of its own. Then:

  single  one client POSTs 64 items and polls until done;
  many    8 clients (threads, each with its own HTTP client) POST 8 items each at the same instant and poll until
          their batch is done; the clock runs from the common start to the last batch done.

Items are distinct across the two runs (no result-cache or prefix-cache help). The worker's own counters say how
many engine calls each run took: a worker that coalesces queued chunks grades the 8 small batches in few calls.
Prints both throughputs and their ratio (target >= 0.9); writes bench/results/small_batches.json.

    .venv/bin/python -m bench.small_batches [--model NAME] [--clients 8] [--items 8]
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from typing import Any

from bench.common import COT_PROMPT, build_triples, rate, ratio, save, setup_logging, table, triple_dicts
from bench.stack import Stack, service
from juiz.engines.models import DEFAULT_MODEL
from schemas import BatchOptions, BatchView

log = logging.getLogger("bench.small_batches")

NAME = "small_batches"
TARGET = 0.9
POLL_S = 0.2
WARMUP_ITEMS = 2  # enough to compile the grammar and make the first engine call; untimed


def run_single(stack: Stack, n: int, options: BatchOptions) -> dict[str, Any]:
    items = triple_dicts(build_triples(n, "single"))
    before = stack.engine_counters()
    with stack.client() as client:
        started = time.perf_counter()
        batch = client.submit(items, options)
        view = client.wait(batch.id, poll_s=POLL_S)
        seconds = time.perf_counter() - started
    return _figures(stack, before, seconds, n, [view])


def run_many(stack: Stack, clients: int, per_client: int, options: BatchOptions) -> dict[str, Any]:
    batches = [triple_dicts(build_triples(per_client, f"client{c}")) for c in range(clients)]
    views: list[BatchView | None] = [None] * clients
    errors: list[str] = []
    barrier = threading.Barrier(clients + 1)
    finished_at = [0.0] * clients

    def one_client(c: int) -> None:
        with stack.client() as client:
            barrier.wait()
            try:
                batch = client.submit(batches[c], options)
                views[c] = client.wait(batch.id, poll_s=POLL_S)
            except Exception as exc:  # reported, not raised: the other clients' figures still count
                errors.append(f"client {c}: {type(exc).__name__}: {exc}")
            finished_at[c] = time.perf_counter()

    before = stack.engine_counters()
    threads = [threading.Thread(target=one_client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    seconds = max(finished_at) - started
    figures = _figures(stack, before, seconds, clients * per_client, [v for v in views if v is not None])
    figures["per_client_seconds"] = [round(f - started, 2) for f in finished_at]
    figures["errors"] = errors
    return figures


def _figures(stack: Stack, before: dict[str, float], seconds: float, n: int, views: list[BatchView]) -> dict[str, Any]:
    after = stack.engine_counters()
    calls = int(after["engine_calls"] - before["engine_calls"])
    items = int(after["engine_items"] - before["engine_items"])
    return {
        "items": n,
        "seconds": round(seconds, 3),
        "judgements_per_s": rate(n, seconds),
        "ok": sum(v.counts.ok for v in views),
        "done_batches": sum(v.status.value == "done" for v in views),
        "engine_calls": calls,
        "engine_items": items,
        "mean_items_per_engine_call": round(items / calls, 1) if calls else None,
        "engine_seconds": round(after["engine_seconds"] - before["engine_seconds"], 3),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--items", type=int, default=8, help="items per client batch")
    parser.add_argument("--order", default="single,many", help="which run goes first")
    args = parser.parse_args(argv)
    setup_logging()
    options = BatchOptions(prompt=COT_PROMPT)
    total = args.clients * args.items
    runs: dict[str, dict[str, Any]] = {}
    with service(NAME, args.model) as stack:
        with stack.client() as client:
            warm = client.submit(triple_dicts(build_triples(WARMUP_ITEMS, "warm-small")), options)
            client.wait(warm.id, poll_s=POLL_S)
        for which in args.order.split(","):
            if which == "single":
                runs["single"] = run_single(stack, total, options)
            else:
                runs["many"] = run_many(stack, args.clients, args.items, options)
            log.info("%s: %.1fs, %d engine call(s)", which, runs[which]["seconds"], runs[which]["engine_calls"])
    many_over_single = ratio(runs["many"]["judgements_per_s"], runs["single"]["judgements_per_s"])

    print(f"\nMany small batches — model {args.model}, {args.clients} clients x {args.items} items vs 1 x {total}")
    print(
        table(
            [
                [
                    f"1 x {total}",
                    r["judgements_per_s"],
                    r["seconds"],
                    r["engine_calls"],
                    r["mean_items_per_engine_call"],
                ]
                if name == "single"
                else [
                    f"{args.clients} x {args.items}",
                    r["judgements_per_s"],
                    r["seconds"],
                    r["engine_calls"],
                    r["mean_items_per_engine_call"],
                ]
                for name, r in runs.items()
            ],
            ["run", "j/s", "seconds", "engine calls", "items/call"],
        )
    )
    print(f"many/single: {many_over_single} (target >= {TARGET})")
    payload = {
        "model": args.model,
        "clients": args.clients,
        "items_per_client": args.items,
        "runs": runs,
        "many_over_single": many_over_single,
        "target_ratio": TARGET,
    }
    print(f"written: {save(NAME, payload)}")
    return payload


if __name__ == "__main__":
    main()
