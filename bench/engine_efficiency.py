"""Engine efficiency: how much of the raw engine's throughput juiz keeps, in process and through the service.

For N items (default 64 and 256), the same conversations and the same SamplingParams (juiz's default prompt, CoT
mode, structured-output regex, logprobs) go:

  (a) raw     straight through `vllm.LLM.chat`, one call;
  (b) juiz    through `Judge.grade` in process (render → one engine call → parse), on the same engine as (a);
  (c) service through the HTTP API with one `juiz worker` (POST → poll GET /v1/batches/{id} until done).

(a) and (b) share one engine, warmed up once; the prefix cache is reset before every measurement and their order
alternates between sizes. The engine is then shut down and (c) starts its own worker (one engine at a time), warmed
up with a batch of its own. Items carry per-size tags, so no prompt repeats across sizes (see bench.common).
Prints judgements/s, (b)/(a), (c)/(a) and mean prompt/output tokens per item;
writes bench/results/engine_efficiency.json.

    .venv/bin/python -m bench.engine_efficiency [--model NAME] [--sizes 64,256] [--no-service]
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

from bench.common import (
    COT_PROMPT,
    build_triples,
    close_engine,
    conversations,
    load_engine,
    rate,
    ratio,
    raw_chat,
    reset_prefix_cache,
    save,
    setup_logging,
    table,
    token_counts,
    triple_dicts,
)
from bench.stack import service
from juiz.engines.models import DEFAULT_MODEL
from juiz.judging.judge import Judge
from juiz.judging.plan import COT_REQUEST
from schemas import BatchOptions, JudgementStatus

log = logging.getLogger("bench.engine_efficiency")

NAME = "engine_efficiency"
TARGET = 0.95
WARMUP_ITEMS = 2  # enough to compile the grammar and make the first engine call; untimed
POLL_S = 0.2


def measure_in_process(model: str, sizes: list[int], options: BatchOptions) -> dict[int, dict[str, Any]]:
    engine = load_engine(model)
    judge = Judge(engine)
    try:
        warm = build_triples(WARMUP_ITEMS, "warm")
        raw_chat(engine, conversations(warm, options), COT_REQUEST)
        judge.grade(warm, options)
        figures: dict[int, dict[str, Any]] = {}
        for k, n in enumerate(sizes):
            items = build_triples(n, f"n{n}")
            row: dict[str, Any] = {"n": n, "startup_s": round(engine.startup_s, 1)}
            started = time.perf_counter()
            convs = conversations(items, options)
            row["render_s"] = round(time.perf_counter() - started, 4)  # what (b) adds before the engine call
            order = ("raw", "juiz") if k % 2 == 0 else ("juiz", "raw")
            row["order"] = list(order)
            for side in order:
                reset_prefix_cache(engine)
                if side == "raw":
                    seconds, outputs = raw_chat(engine, convs, COT_REQUEST)
                    row["raw"] = {"seconds": round(seconds, 3), "judgements_per_s": rate(n, seconds)}
                    row["tokens"] = token_counts(outputs)
                else:
                    started = time.perf_counter()
                    judgements = judge.grade(items, options)
                    seconds = time.perf_counter() - started
                    row["juiz"] = {
                        "seconds": round(seconds, 3),
                        "judgements_per_s": rate(n, seconds),
                        "ok": sum(j.status is JudgementStatus.OK for j in judgements),
                        "parse_error": sum(j.status is JudgementStatus.PARSE_ERROR for j in judgements),
                        "failed": sum(j.status is JudgementStatus.FAILED for j in judgements),
                    }
                log.info("N=%d %s: %.1fs", n, side, seconds)
            figures[n] = row
        return figures
    finally:
        close_engine(engine)


def measure_service(model: str, sizes: list[int], options: BatchOptions) -> dict[int, dict[str, Any]]:
    figures: dict[int, dict[str, Any]] = {}
    with service(NAME, model) as stack, stack.client() as client:
        warm = client.submit(triple_dicts(build_triples(WARMUP_ITEMS, "warm-svc")), options)
        client.wait(warm.id, poll_s=POLL_S)
        for n in sizes:
            items = triple_dicts(build_triples(n, f"n{n}"))
            before = stack.engine_counters()
            started = time.perf_counter()
            batch = client.submit(items, options)
            accepted = time.perf_counter() - started
            view = client.wait(batch.id, poll_s=POLL_S)
            seconds = time.perf_counter() - started
            after = stack.engine_counters()
            engine_s = after["engine_seconds"] - before["engine_seconds"]
            figures[n] = {
                "seconds": round(seconds, 3),
                "judgements_per_s": rate(n, seconds),
                "post_s": round(accepted, 4),
                "status": view.status.value,
                "ok": view.counts.ok,
                "parse_error": view.counts.parse_error,
                "failed": view.counts.failed,
                "engine_calls": after["engine_calls"] - before["engine_calls"],
                "engine_seconds": round(engine_s, 3),
                "outside_engine_s": round(seconds - engine_s, 3),
                "cache_hits": after["cache_hits"] - before["cache_hits"],
            }
            log.info("N=%d service: %.1fs (%.1fs in the engine)", n, seconds, engine_s)
    return figures


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--sizes", default="64,256", help="comma-separated item counts")
    parser.add_argument("--no-service", action="store_true", help="skip (c), the HTTP service")
    args = parser.parse_args(argv)
    setup_logging()
    sizes = [int(s) for s in args.sizes.split(",")]
    options = BatchOptions(prompt=COT_PROMPT)  # CoT, language per question

    rows = measure_in_process(args.model, sizes, options)
    service_rows = {} if args.no_service else measure_service(args.model, sizes, options)
    for n, row in rows.items():
        raw = row["raw"]["judgements_per_s"]
        row["juiz_over_raw"] = ratio(row["juiz"]["judgements_per_s"], raw)
        if n in service_rows:
            row["service"] = service_rows[n]
            row["service_over_raw"] = ratio(service_rows[n]["judgements_per_s"], raw)

    print(f"\nEngine efficiency — model {args.model}, prompt {options.prompt or 'default (juiz-1)'}, mode cot")
    print(
        table(
            [
                [
                    n,
                    r["raw"]["judgements_per_s"],
                    r["juiz"]["judgements_per_s"],
                    r.get("service", {}).get("judgements_per_s"),
                    r["juiz_over_raw"],
                    r.get("service_over_raw"),
                    r["tokens"]["prompt_tokens_mean"],
                    r["tokens"]["output_tokens_mean"],
                ]
                for n, r in rows.items()
            ],
            ["N", "raw j/s", "juiz j/s", "service j/s", "(b)/(a)", "(c)/(a)", "prompt tok", "output tok"],
        )
    )
    print(f"target: (b)/(a) and (c)/(a) >= {TARGET} at N = 256")
    payload = {
        "model": args.model,
        "prompt": "answer_relevance@juiz-1 (default)",
        "mode": "cot",
        "sampling": COT_REQUEST.describe(),
        "target_ratio": TARGET,
        "sizes": {str(n): r for n, r in rows.items()},
    }
    print(f"written: {save(NAME, payload)}")
    return payload


if __name__ == "__main__":
    main()
