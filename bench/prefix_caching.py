"""Prefix caching: the same questions graded twice with different answers; how much faster the second pass is.

In process, juiz's engine adapter (prefix caching on, as always), juiz's default prompt. For each mode (cot, fast):

  first        N items (question i, answer i), after a prefix-cache reset;
  second       the same N questions, each with another item's answer (answer i+1), right after: the system
               prompt and every question are in the cache, the answers and what follows them are not;
  second cold  the second pass again after a reset: the same prompts and outputs without the cache, so
               cold/second isolates what the cache is worth (first/second also carries the different answers).

Within one pass the items already share the cached system prompt, so the cache's share of the work depends on the
KV block size (only whole blocks are reused). On CPU, a second engine with vLLM's CPU default block size (128;
juiz uses 32) repeats the cold second pass: 128/32 is what juiz's smaller block is worth on the same prompts.

vLLM's own count of prompt tokens served from the cache (`num_cached_tokens`) is reported for each pass.
Writes bench/results/prefix_caching.json.

    .venv/bin/python -m bench.prefix_caching [--model NAME] [--n 16] [--modes cot,fast] [--compare-block-size 128]
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
    completion_tokens,
    conversations,
    load_engine,
    rate,
    ratio,
    request_for,
    reset_prefix_cache,
    save,
    setup_logging,
    table,
)
from juiz.engines.base import Conversation
from juiz.engines.models import DEFAULT_MODEL, resolve_model
from juiz.engines.vllm_engine import CPU_BLOCK_SIZE, VLLMEngine
from schemas import BatchOptions, Triple

log = logging.getLogger("bench.prefix_caching")

NAME = "prefix_caching"
WARMUP_ITEMS = 2  # enough to compile the grammar and make the first engine call; untimed


def other_answers(items: list[Triple]) -> list[Triple]:
    """The same questions, each with the next item's answer."""
    n = len(items)
    return [t.model_copy(update={"answer": items[(i + 1) % n].answer}) for i, t in enumerate(items)]


def one_pass(engine: VLLMEngine, convs: list[Conversation], mode: str) -> dict[str, Any]:
    started = time.perf_counter()
    completions = engine.generate(convs, request_for(mode))
    seconds = time.perf_counter() - started
    tokens = completion_tokens(completions)
    cached, prompt = sum(c.cached_prompt_tokens for c in completions), sum(c.prompt_tokens for c in completions)
    return {
        "seconds": round(seconds, 3),
        "judgements_per_s": rate(len(convs), seconds),
        "prompt_tokens_mean": tokens["prompt_tokens_mean"],
        "cached_prompt_tokens_mean": tokens["cached_prompt_tokens_mean"],
        "cached_share": round(cached / max(prompt, 1), 3),
        "output_tokens_mean": tokens["output_tokens_mean"],
    }


def compare_block_size(model: str, block_size: int, items: list[Triple], results: dict[str, dict[str, Any]]) -> None:
    """The cold second pass again on an engine with another KV block size (the same prompts, a fresh cache)."""
    engine = VLLMEngine(resolve_model(model), model_id=model, block_size=block_size)
    try:
        for mode, row in results.items():
            options = BatchOptions(mode=mode, prompt=COT_PROMPT)  # type: ignore[arg-type]
            engine.generate(conversations(build_triples(WARMUP_ITEMS, "warm-pc"), options), request_for(mode))
            reset_prefix_cache(engine)
            compared = one_pass(engine, conversations(items, options), mode)
            row["second_cold_block_compared"] = compared
            row["block_size_speedup"] = ratio(compared["seconds"], row["second_cold"]["seconds"])
            log.info("%s: block %d, second cold %.1fs", mode, block_size, compared["seconds"])
    finally:
        close_engine(engine)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--n", type=int, default=16, help="questions (each graded three times per mode)")
    parser.add_argument("--modes", default="cot,fast")
    parser.add_argument(
        "--compare-block-size", type=int, default=128, help="CPU only: block size of the comparison engine (0: skip)"
    )
    args = parser.parse_args(argv)
    setup_logging()
    first_items = build_triples(args.n, "pc")
    second_items = other_answers(first_items)
    results: dict[str, dict[str, Any]] = {}
    engine = load_engine(args.model)
    try:
        for mode in args.modes.split(","):
            options = BatchOptions(mode=mode, prompt=COT_PROMPT)  # type: ignore[arg-type]
            engine.generate(conversations(build_triples(WARMUP_ITEMS, "warm-pc"), options), request_for(mode))
            first, second = conversations(first_items, options), conversations(second_items, options)
            reset_prefix_cache(engine)
            row: dict[str, Any] = {"first": one_pass(engine, first, mode), "second": one_pass(engine, second, mode)}
            reset_prefix_cache(engine)
            row["second_cold"] = one_pass(engine, second, mode)
            row["second_over_first_speedup"] = ratio(row["first"]["seconds"], row["second"]["seconds"])
            row["cache_speedup_same_items"] = ratio(row["second_cold"]["seconds"], row["second"]["seconds"])
            results[mode] = row
            log.info(
                "%s: first %.1fs, second %.1fs, second cold %.1fs",
                mode,
                row["first"]["seconds"],
                row["second"]["seconds"],
                row["second_cold"]["seconds"],
            )
    finally:
        close_engine(engine)
    on_cpu = engine.block_size == CPU_BLOCK_SIZE
    if args.compare_block_size and on_cpu:
        compare_block_size(args.model, args.compare_block_size, second_items, results)

    print(f"\nPrefix caching — model {args.model}, N = {args.n}, same questions, other answers")
    rows = []
    for mode, row in results.items():
        for name in ("first", "second", "second_cold"):
            p = row[name]
            rows.append(
                [
                    mode,
                    name,
                    p["seconds"],
                    p["judgements_per_s"],
                    p["prompt_tokens_mean"],
                    p["cached_prompt_tokens_mean"],
                    p["output_tokens_mean"],
                ]
            )
    print(table(rows, ["mode", "pass", "seconds", "j/s", "prompt tok", "cached tok", "output tok"]))
    for mode, row in results.items():
        print(
            f"{mode}: second pass {row['second_over_first_speedup']}x the first; "
            f"the cache alone (same prompts, cold vs warm) {row['cache_speedup_same_items']}x"
        )
        if "block_size_speedup" in row:
            print(
                f"{mode}: block {CPU_BLOCK_SIZE} vs {args.compare_block_size}, same cold pass: "
                f"{row['block_size_speedup']}x (cached prompt tokens {row['second_cold']['cached_prompt_tokens_mean']}"
                f" vs {row['second_cold_block_compared']['cached_prompt_tokens_mean']})"
            )
    payload = {
        "model": args.model,
        "n": args.n,
        "prompt": COT_PROMPT,
        "block_size": CPU_BLOCK_SIZE if on_cpu else None,
        "compared_block_size": args.compare_block_size if on_cpu else None,
        "modes": results,
    }
    print(f"written: {save(NAME, payload)}")
    return payload


if __name__ == "__main__":
    main()
