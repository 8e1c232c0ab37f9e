"""The same judge two ways: vLLM in process (juiz's default engine) vs vLLM's OpenAI-compatible server through juiz's
`openai` back end (JUIZ_ENGINE=openai), same model, same items, same prompts, one after the other (never both on
the CPU at once).

1. In process: `VLLMEngine` as `juiz score` builds it; warm-up (grammar compiled, one small call), prefix cache
   reset, then `Judge.grade` over the N items in one call, timed.
2. Server: `python -m vllm.entrypoints.openai.api_server` with the same engine settings (prefix caching, KV block
   size, eager on CPU, max_model_len 8192; see bench.trulens_peer.server_command), `OpenAIEngine` with every item in
   flight at once (max_concurrency = N, so the server batches them as `llm.chat` does), structured outputs through
   vLLM's request extension, top-20 logprobs; warm-up, prefix cache reset (`POST /reset_prefix_cache`), then the
   same `Judge.grade`, timed.

Prints judgements/s for each, server ÷ in process, how often both gave the same 0-3 score (and within one point),
the mean |Δ expected score|, and the token counts per item; writes bench/results/openai_backend.json.
Temperature 0 on both sides, but batching differs (the server schedules requests as they arrive), so a few scores
may differ on numerics alone.

    .venv/bin/python -m bench.openai_backend [--model NAME] [--n 64] [--mode cot|fast]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from typing import Any

import httpx

from bench.common import (
    COT_PROMPT,
    WORK,
    Recorder,
    build_triples,
    close_engine,
    completion_tokens,
    load_engine,
    rate,
    ratio,
    reset_prefix_cache,
    save,
    setup_logging,
    table,
)
from bench.trulens_peer import SERVED_NAME, vllm_server
from juiz.engines.models import DEFAULT_MODEL
from juiz.engines.openai_server import OpenAIEngine
from juiz.judging.judge import Judge
from schemas import BatchOptions, Judgement, JudgementStatus, Triple

log = logging.getLogger("bench.openai_backend")

NAME = "openai_backend"
WARMUP_ITEMS = 2


def measure(judge: Judge, recorder: Recorder, triples: list[Triple], options: BatchOptions) -> dict[str, Any]:
    started = time.perf_counter()
    judgements = judge.grade(triples, options)
    seconds = time.perf_counter() - started
    return {
        "seconds": round(seconds, 3),
        "judgements_per_s": rate(len(triples), seconds),
        "ok": sum(j.status is JudgementStatus.OK for j in judgements),
        "expected_score_present": sum(j.expected_score is not None for j in judgements),
        "tokens": completion_tokens(recorder.last),
        "judgements": judgements,
    }


def in_process(model: str, triples: list[Triple], warm: list[Triple], options: BatchOptions) -> dict[str, Any]:
    engine = load_engine(model)
    try:
        recorder = Recorder(engine)
        judge = Judge(recorder)
        judge.warm_up()
        judge.grade(warm, options)
        reset_prefix_cache(engine)
        figures = measure(judge, recorder, triples, options)
    finally:
        close_engine(engine)
    log.info("in process: %.1fs, %.3f j/s", figures["seconds"], figures["judgements_per_s"])
    return figures


def on_server(model: str, triples: list[Triple], warm: list[Triple], options: BatchOptions) -> dict[str, Any]:
    workdir = WORK / NAME
    workdir.mkdir(parents=True, exist_ok=True)
    with vllm_server(model, workdir / "server.log") as base:
        engine = OpenAIEngine(f"{base}/v1", SERVED_NAME, max_concurrency=max(len(triples), 1))
        try:
            recorder = Recorder(engine)
            judge = Judge(recorder)
            judge.warm_up()
            judge.grade(warm, options)
            httpx.post(f"{base}/reset_prefix_cache", timeout=60).raise_for_status()
            figures = measure(judge, recorder, triples, options)
            figures["dialect"] = engine.dialect
        finally:
            engine.close()
    log.info("server: %.1fs, %.3f j/s", figures["seconds"], figures["judgements_per_s"])
    return figures


def compare(a: list[Judgement], b: list[Judgement]) -> dict[str, Any]:
    """Same 0-3 score and within one point over items both scored; mean |Δ expected score| where both have one."""
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if x.score is not None and y.score is not None]
    both_expected = [
        abs(x.expected_score - y.expected_score)
        for x, y in pairs
        if x.expected_score is not None and y.expected_score is not None
    ]
    return {
        "n": len(pairs),
        "same": round(sum(x.score == y.score for x, y in pairs) / len(pairs), 3) if pairs else None,
        "within_one": round(sum(abs((x.score or 0) - (y.score or 0)) <= 1 for x, y in pairs) / len(pairs), 3)
        if pairs
        else None,
        "mean_abs_expected_diff": round(statistics.fmean(both_expected), 4) if both_expected else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.openai_backend", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--n", type=int, default=64, help="items graded by each side")
    parser.add_argument("--mode", choices=["cot", "fast"], default="cot")
    args = parser.parse_args(argv)
    setup_logging()
    triples = build_triples(args.n, "ob")
    warm = build_triples(WARMUP_ITEMS, "ob-warm")
    options = BatchOptions(mode=args.mode, prompt=COT_PROMPT)
    local = in_process(args.model, triples, warm, options)
    server = on_server(args.model, triples, warm, options)
    agreement = compare(local.pop("judgements"), server.pop("judgements"))
    result = {
        "model": args.model,
        "n": args.n,
        "mode": args.mode,
        "in_process": local,
        "server": server,
        "server_over_in_process": ratio(server["judgements_per_s"], local["judgements_per_s"]),
        "agreement": agreement,
    }
    path = save(NAME, result)
    rows = [
        ["in process", local["judgements_per_s"], local["ok"], local["expected_score_present"], local["tokens"]],
        ["OpenAI server", server["judgements_per_s"], server["ok"], server["expected_score_present"], server["tokens"]],
    ]
    print(table(rows, ["back end", "judgements/s", "ok", "expected score", "tokens per item"]))
    print(
        f"server ÷ in process: {result['server_over_in_process']}; same score: {agreement['same']} "
        f"(within one: {agreement['within_one']}); mean |Δ expected|: {agreement['mean_abs_expected_diff']}"
    )
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
