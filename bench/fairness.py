"""Fairness under a backlog (issue 17's second "done when") — a FAKE engine, no model.

A private redis-server and --workers (1) worker process(es) (`bench.fake_worker`: the real worker loop on a FAKE
engine costing --call-s per call plus --item-s per item plus --conversation-s per conversation, default settings:
32-item chunks, 256-item calls), grading with --prompt (`cot`: the CoT prompt, one conversation an item; `default`:
the default judge, a reference then several checks an item, two engine calls a job). The cases (--cases), each on a
fresh Redis db and fresh workers, in one run:

  alone       tenant B submits one --small (8)-item batch to idle workers
  shallow     tenant A submits --shallow (5) batches × --batch-items (256), then B its 8 items at once
  deep        tenant A submits --deep (40) batches × 256, then B its 8 items at once
  midcall     as deep, but B comes --b-delay-s (5) after A's last batch: every worker is inside an engine call then
  throughput  tenant A submits --throughput (4) batches × 256, then B its 8 items; A waited for to the end: A's
              items per second from its first batch's creation to its last batch done (B's interruption included),
              and per second of engine time (the sum of every call's duration, B's calls and cut calls included):
              the wall clock is quantised by whole jobs, the engine time is not; and per second of NOMINAL engine
              time (the FAKE costs of the calls made and conversations generated, what an idle machine would take)

Batches are written through the store (`Store.create_batch`, what POST /v1/batches does after validation), one
after another as fast as it goes; B's clock starts when its batch is created. Figures for B: seconds from creation to
done, and engine calls to done — the calls that ended after B was submitted, up to and including the one that
graded B's items (the call already running when B arrives counts: "within 2 engine calls of submission" is B in the
first call to start after it). Also A's items graded before B was done. Target: ≤ 2 calls in every case.

The workers' call log is `bench:calls` (JUIZ_FAKE_EVENTS) plus a file with each call's item tags
(JUIZ_FAKE_CALLS_FILE), which says which call graded B.

    .venv/bin/python -m bench.fairness [--deep 40] [--shallow 5] [--batch-items 256] [--small 8] [--workers 1]
    .venv/bin/python -m bench.fairness --prompt default --workers 2 --conversation-s 0.01 --item-s 0 \
        --cases alone,deep,midcall,throughput --name fairness_default_judge

Writes bench/results/<--name: fairness>.json (fake_engine: true) with the machine it ran on.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from redis import Redis

from bench.common import COT_PROMPT, build_triples, rate, save, setup_logging, table
from bench.fake_worker import CALLS_KEY
from bench.scale_out import fleet, registered, wait_for, warm_up
from juiz.runtime.processes import private_redis
from juiz.runtime.settings import Settings
from juiz.store import Store
from schemas import BatchOptions

log = logging.getLogger("bench.fairness")

NAME = "fairness"
TARGET_CALLS = 2
PROMPTS = {"cot": BatchOptions(prompt=COT_PROMPT), "default": BatchOptions()}  # --prompt


def run_case(
    store: Store,
    calls_file: Path,
    a_batches: int,
    a_items: int,
    b_items: int,
    tag: str,
    options: BatchOptions,
    *,
    finish_a: bool = False,
    b_delay_s: float = 0.0,
    costs: tuple[float, float, float] = (0.0, 0.0, 0.0),
) -> dict[str, Any]:
    """A's batches, then B's; B's seconds and engine calls to done. With `finish_a`, A's batches are waited for too
    and A's items per second reported (`costs`: the FAKE engine's per call, item, conversation); otherwise the rest
    of A's backlog is cancelled once B is done."""
    redis = store.redis
    a_triples = [build_triples(a_items, f"{tag}-a{n}") for n in range(a_batches)]
    b_triples = build_triples(b_items, f"{tag}-b")
    redis.delete(CALLS_KEY)
    calls_file.write_text("")
    started = time.time()
    a_ids = [store.create_batch("tenant-a", options, items)[0].id for items in a_triples]
    time.sleep(b_delay_s)  # the case's shape: B arrives while the workers are inside their calls
    b, _ = store.create_batch("tenant-b", options, b_triples)
    a_submit_s = b.created_at - started
    wait_for(lambda: (r := store.get_batch(b.id)) is not None and r.terminal, f"B's batch ({tag})", timeout_s=1800)
    done = store.get_batch(b.id)
    assert done is not None and done.counts.done == b_items, f"B's batch incomplete: {done}"
    a_graded = sum(store.result_count(i) for i in a_ids)
    a_figures: dict[str, Any] = {}
    if finish_a:
        for batch_id in a_ids:
            wait_for(lambda b=batch_id: (r := store.get_batch(b)) is not None and r.terminal, "A", timeout_s=3600)  # type: ignore[misc]
        records = [r for batch_id in a_ids if (r := store.get_batch(batch_id)) is not None]
        a_seconds = max(r.finished_at or 0 for r in records) - started
        a_done = sum(r.counts.done for r in records)
        a_figures = {
            "a_items_done": a_done,
            "a_items_ok": sum(r.counts.ok for r in records),
            "a_seconds": round(a_seconds, 2),
            "a_items_per_s": rate(a_done, a_seconds),
        }
    for batch_id in a_ids:  # the rest of A's backlog only had to be there
        record = store.get_batch(batch_id)
        if record is not None and not record.terminal:
            store.cancel_batch(record)
    time.sleep(0.5)
    calls = [json.loads(line) for line in calls_file.read_text().splitlines() if line.strip()]
    if finish_a:
        # A's throughput at full use of the workers, without the wall clock's quantisation (whole jobs of up to 256
        # items, split unevenly between the workers at the end): items per second of engine time, times the workers.
        engine_s = sum(c["end"] - c["start"] for c in calls)
        # The same at the FAKE engine's nominal costs (what its sleeps would take on an idle machine): a call's fixed
        # cost, plus each conversation it generated (not those aborted).
        nominal_s = sum(costs[0] + costs[1] * c["n"] + costs[2] * (c["n"] - c.get("aborted", 0)) for c in calls)
        a_figures |= {
            "engine_calls": len(calls),
            "conversations_generated": sum(c["n"] - c.get("aborted", 0) for c in calls),
            "engine_seconds": round(engine_s, 2),
            "a_items_per_engine_s": rate(a_figures["a_items_done"], engine_s),
            "nominal_engine_seconds": round(nominal_s, 2),
            "a_items_per_nominal_engine_s": rate(a_figures["a_items_done"], nominal_s),
        }
    b_prefix = f"{tag}-b-"
    b_calls = [c for c in calls if any(t.startswith(b_prefix) for t in c["tags"])]
    assert b_calls, "no engine call graded B's items"
    b_call = min(b_calls, key=lambda c: c["end"])
    # The calls that ended after B was created, up to B's own (the one in flight at submission included).
    counted = [c for c in calls if b.created_at < c["end"] <= b_call["end"]]
    return {
        "a_batches": a_batches,
        "a_items_queued": a_batches * a_items,
        "a_submit_seconds": round(a_submit_s, 2),
        "b_items": b_items,
        "b_seconds_to_done": round((done.finished_at or 0) - b.created_at, 3),
        "b_items_ok": done.counts.ok,
        "b_engine_calls_to_done": len(counted),
        "b_call_items": b_call["n"],
        "b_calls": len(b_calls),
        "a_items_graded_before_b_done": a_graded,
        "calls_until_b": [c["n"] for c in sorted(counted, key=lambda c: c["end"])],
        **a_figures,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__.splitlines()[0])
    parser.add_argument("--deep", type=int, default=40, help="A's batches in the deep case")
    parser.add_argument("--shallow", type=int, default=5, help="A's batches in the shallow case")
    parser.add_argument("--batch-items", type=int, default=256)
    parser.add_argument("--small", type=int, default=8, help="B's items")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--call-s", type=float, default=1.0, help="FAKE engine: fixed seconds per call")
    parser.add_argument("--item-s", type=float, default=0.01, help="FAKE engine: seconds per item")
    parser.add_argument("--conversation-s", type=float, default=0.0, help="FAKE engine: seconds per conversation")
    parser.add_argument("--prompt", choices=sorted(PROMPTS), default="cot", help="what A and B are graded with")
    parser.add_argument("--throughput", type=int, default=4, help="A's batches in the throughput case")
    parser.add_argument("--b-delay-s", type=float, default=5.0, help="midcall: seconds from A's last batch to B's")
    parser.add_argument("--cases", default="alone,shallow,deep", help="which cases, in order (see above)")
    parser.add_argument("--name", default=NAME, help="results file: bench/results/<name>.json")
    args = parser.parse_args(argv)
    setup_logging()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    sizes = {
        "alone": 0,
        "shallow": args.shallow,
        "deep": args.deep,
        "midcall": args.deep,
        "throughput": args.throughput,
    }
    cases = {case: sizes[case] for case in args.cases.split(",")}
    options = PROMPTS[args.prompt]
    results: dict[str, dict[str, Any]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="juiz-fair-") as tmp,
        private_redis(Path(tmp), dict(os.environ)) as (url, _),
    ):
        workdir = Path(tmp)
        calls_file = workdir / "calls.jsonl"
        settings = Settings.from_env({}, redis_url=url, result_cache=False, log_level="WARNING")
        redis = Redis.from_url(url)
        store = Store(redis, settings)
        for case, a_batches in cases.items():
            redis.flushdb()
            with fleet(settings, workdir, args.call_s, args.item_s) as f:
                f.env["JUIZ_FAKE_CALLS_FILE"] = str(calls_file)
                f.env["JUIZ_FAKE_CONVERSATION_S"] = str(args.conversation_s)
                for _ in range(args.workers):
                    f.start()
                wait_for(lambda: registered(redis, settings.queue) == args.workers, "the workers")
                warm_up(store, f)
                results[case] = run_case(
                    store,
                    calls_file,
                    a_batches,
                    args.batch_items,
                    args.small,
                    case,
                    options,
                    finish_a=case == "throughput",
                    b_delay_s=args.b_delay_s if case == "midcall" else 0.0,
                    costs=(args.call_s, args.item_s, args.conversation_s),
                )
                log.info("%s: %s", case, results[case])
        redis.close()
        gather = {"gather_s": settings.gather_s, "gather_quiet_s": settings.gather_quiet_s}
        shape = {"chunk_size": settings.chunk_size, "coalesce_max_items": settings.coalesce_max_items}

    alone = results["alone"]["b_seconds_to_done"] if "alone" in results else None
    for r in results.values():
        r["b_seconds_over_alone"] = round(r["b_seconds_to_done"] / alone, 2) if alone else None
        r["target_met"] = r["b_engine_calls_to_done"] <= TARGET_CALLS
    rows = [
        [
            case,
            r["a_items_queued"],
            r["b_seconds_to_done"],
            r["b_seconds_over_alone"],
            r["b_engine_calls_to_done"],
            r["a_items_graded_before_b_done"],
            "met" if r["target_met"] else "NOT met",
        ]
        for case, r in results.items()
    ]
    costs = f"{args.call_s} s/call + {args.item_s} s/item + {args.conversation_s} s/conversation"
    print(f"\nFairness — FAKE ENGINE ({costs}), {args.workers} worker(s), prompt {args.prompt}")
    print(table(rows, ["case", "A queued", "B s", "÷ alone", "B calls", "A graded first", f"<= {TARGET_CALLS}"]))
    if "throughput" in results:
        print(f"A's throughput with B in between: {results['throughput']['a_items_per_s']} items/s")
    payload = {
        "fake_engine": True,
        "fake_costs_s": {"call": args.call_s, "item": args.item_s, "conversation": args.conversation_s},
        "prompt": args.prompt,
        "workers": args.workers,
        **shape,
        **gather,
        "target_engine_calls": TARGET_CALLS,
        "midcall_b_delay_s": args.b_delay_s,
        "cases": results,
        "load_average_1min_at_end": round(os.getloadavg()[0], 2),
    }
    print(f"written: {save(args.name, payload)}")
    return 0 if all(r["target_met"] for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
