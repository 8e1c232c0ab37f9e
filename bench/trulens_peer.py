"""Against the seeds' own judge: TruLens 1.5.3 and juiz grading the same items with the same model, in one run.

1. vLLM's OpenAI-compatible server (`python -m vllm.entrypoints.openai.api_server`, this venv) serves the model on
   127.0.0.1 with the engine settings juiz uses in process (prefix caching, max_model_len 8192, eager on CPU) and
   juiz's output budget as the server-side cap (`--override-generation-config '{"max_new_tokens": 641}'`: TruLens
   sets no max_tokens). Both sides sample at temperature 0 (TruLens's default; juiz's always).
2. TruLens (its own venv, bench/.venv-trulens, created here if missing) grades the N items with
   `relevance_with_cot_reasons` through its OpenAI provider (bench/trulens_runner.py): at its default (one call
   after another) and with 8 and 16 threads. The server's prefix cache is reset before each run, and its own
   counters give the prompt/output tokens TruLens's prompts and replies took.
3. The server is stopped (the CPU is shared) and juiz grades the same items in process with its TruLens-faithful
   prompt, `answer_relevance@trulens-1` (English, as TruLens's prompt is), in `cot` mode and in `fast` mode (one
   forward pass, expected score from the digit probabilities), plus the raw `llm.chat` of the same conversations
   as the floor juiz is measured against.

Prints judgements/s, juiz/TruLens ratios against the targets, how often TruLens and juiz give the same 0–3 score
(TruLens's 0–1 × 3, rounded), fast-vs-CoT agreement, and the token counts behind the gap; writes
bench/results/trulens_peer.json.

    .venv/bin/python -m bench.trulens_peer [--model NAME] [--n 64] [--threads 1,8,16,32]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    REPO,
    WORK,
    Recorder,
    build_triples,
    close_engine,
    completion_tokens,
    conversations,
    load_engine,
    rate,
    ratio,
    raw_chat,
    request_for,
    reset_prefix_cache,
    save,
    setup_logging,
    table,
    token_counts,
    triple_dicts,
)
from juiz.engines.models import DEFAULT_MODEL, resolve_model
from juiz.engines.vllm_engine import CPU_BLOCK_SIZE, cpu_defaults, engine_dtype, has_cuda
from juiz.judging.judge import Judge
from juiz.judging.parsing import COT_MAX_TOKENS
from juiz.runtime.processes import child, free_port, wait_until
from juiz.runtime.settings import Settings
from schemas import BatchOptions, Judgement, JudgementStatus

log = logging.getLogger("bench.trulens_peer")

NAME = "trulens_peer"
TRULENS_VENV = REPO / "bench" / ".venv-trulens"
TRULENS_REQUIREMENTS = ("trulens==1.5.3", "trulens-providers-openai==1.5.3", "langchain<1.0")
RUNNER = REPO / "bench" / "trulens_runner.py"
PROMPT = "answer_relevance@trulens-1"
SERVED_NAME = "judge"
WARMUP_ITEMS = 2  # enough to compile the grammar and make the first engine call; untimed
TARGETS = {"cot_over_trulens_default": 4.0, "cot_over_trulens_best": 1.0, "fast_over_trulens_best": 5.0}


def ensure_trulens_venv() -> Path:
    """bench/.venv-trulens with TruLens 1.5.3 (git-ignored); created on first use (~75 s, 1.4 GiB)."""
    python = TRULENS_VENV / "bin" / "python"
    probe = [str(python), "-c", "import trulens.providers.openai"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    log.info("creating %s with %s", TRULENS_VENV, ", ".join(TRULENS_REQUIREMENTS))
    base_python = Path(sys.base_prefix) / "bin" / "python3"  # the interpreter juiz's own venv was made from
    subprocess.run([str(base_python), "-m", "venv", str(TRULENS_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *TRULENS_REQUIREMENTS], check=True)
    return python


# --- vLLM's OpenAI-compatible server ---------------------------------------------------------------------------


def server_command(model_dir: str, port: int) -> list[str]:
    # What VLLMEngine does on CPU (eager, block size, float32 where bf16 would be emulated), for parity.
    eager = os.environ.get("JUIZ_ENFORCE_EAGER", "1") == "1"
    dtype = engine_dtype(Settings.from_env().dtype, has_cuda())
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model_dir,
        "--served-model-name",
        SERVED_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enable-prefix-caching",
        "--max-model-len",
        "8192",
        "--seed",
        "0",
        "--override-generation-config",
        json.dumps({"max_new_tokens": COT_MAX_TOKENS}),
        "--block-size",
        str(CPU_BLOCK_SIZE),
        *(["--enforce-eager"] if eager else []),
        *(["--dtype", dtype] if dtype else []),
    ]


@contextmanager
def vllm_server(model: str, log_path: Path) -> Iterator[str]:
    """vLLM's OpenAI-compatible server on a free port, a child process stopped on the way out: its base URL once
    /health answers."""
    cpu_defaults()
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}  # exposes POST /reset_prefix_cache
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with child("vLLM OpenAI server", server_command(resolve_model(model), port), env, log_path) as server:

        def healthy() -> bool:
            try:
                return httpx.get(f"{base}/health", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        started = time.perf_counter()
        wait_until(healthy, 1800, [server], "vLLM's OpenAI server")
        log.info("vLLM server ready in %.1fs", time.perf_counter() - started)
        yield base


_METRIC = re.compile(r"^(?P<name>[a-zA-Z_:]+)(?:\{[^}]*\})?\s+(?P<value>[-+0-9.eE]+|NaN)$")


def server_counters(base: str) -> dict[str, float]:
    """vLLM's Prometheus counters, summed over label sets."""
    wanted = {
        "vllm:prompt_tokens_total": "prompt_tokens",
        "vllm:generation_tokens_total": "output_tokens",
        "vllm:prefix_cache_hits_total": "cached_prompt_tokens",
        "vllm:request_success_total": "requests",
    }
    totals = dict.fromkeys(wanted.values(), 0.0)
    for line in httpx.get(f"{base}/metrics", timeout=30).text.splitlines():
        match = _METRIC.match(line.strip())
        if match and match["name"] in wanted:
            totals[wanted[match["name"]]] += float(match["value"])
    return totals


def run_trulens(
    python: Path, base: str, items: list[dict[str, Any]], warm: list[dict[str, Any]], threads: int, workdir: Path
) -> dict[str, Any]:
    spec = workdir / f"spec-{threads}.json"
    out = workdir / f"trulens-{threads}.json"
    spec.write_text(
        json.dumps(
            {"base_url": f"{base}/v1", "model": SERVED_NAME, "threads": threads, "items": items, "warmup_items": warm}
        ),
        encoding="utf-8",
    )
    httpx.post(f"{base}/reset_prefix_cache", timeout=60).raise_for_status()
    before = server_counters(base)
    subprocess.run([str(python), str(RUNNER), str(spec), str(out)], check=True, cwd=workdir)
    after = server_counters(base)
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    delta = {k: after[k] - before[k] for k in after}
    calls = max(delta["requests"], 1.0)  # the warm-up calls are counted too: per-request means stay right
    result["server"] = {
        "requests": int(delta["requests"]),
        "prompt_tokens_mean": round(delta["prompt_tokens"] / calls, 1),
        "output_tokens_mean": round(delta["output_tokens"] / calls, 1),
        "cached_prompt_tokens_mean": round(delta["cached_prompt_tokens"] / calls, 1),
    }
    result["errors"] = sum(r["error"] is not None for r in result["results"])
    log.info("TruLens, %d thread(s): %.1fs, %.3f j/s", threads, result["seconds"], result["judgements_per_s"])
    return result


def measure_trulens(
    model: str,
    n_items: list[dict[str, Any]],
    warm: list[dict[str, Any]],
    threads: list[int],
    sequential_items: list[dict[str, Any]],
) -> dict[int, dict[str, Any]]:
    python = ensure_trulens_venv()
    workdir = WORK / NAME
    workdir.mkdir(parents=True, exist_ok=True)
    runs: dict[int, dict[str, Any]] = {}
    with vllm_server(model, workdir / "vllm-server.log") as base:
        for k in threads:
            runs[k] = run_trulens(python, base, sequential_items if k == 1 else n_items, warm, k, workdir)
    return runs


# --- juiz, same items, in process ------------------------------------------------------------------------------


def measure_juiz(model: str, triples: list[Any], warm: list[Any], lang: str, with_raw: bool) -> dict[str, Any]:
    engine = load_engine(model)
    recorder = Recorder(engine)  # its token counts stand in for a raw `llm.chat` run (engine_efficiency: ~1.0)
    judge = Judge(recorder)
    figures: dict[str, Any] = {}
    try:
        judge.warm_up()
        for mode in ("cot", "fast"):
            judge.grade(warm, BatchOptions(prompt=PROMPT, mode=mode, lang=lang))  # type: ignore[arg-type]
        for mode in ("cot", "fast"):
            options = BatchOptions(prompt=PROMPT, mode=mode, lang=lang)  # type: ignore[arg-type]
            reset_prefix_cache(engine)
            started = time.perf_counter()
            judgements = judge.grade(triples, options)
            seconds = time.perf_counter() - started
            figures[mode] = {
                "seconds": round(seconds, 3),
                "judgements_per_s": rate(len(triples), seconds),
                "ok": sum(j.status is JudgementStatus.OK for j in judgements),
                "tokens": completion_tokens(recorder.last),
                "judgements": judgements,
            }
            log.info("juiz %s: %.1fs", mode, seconds)
            if with_raw:
                reset_prefix_cache(engine)
                raw_s, outputs = raw_chat(engine, conversations(triples, options), request_for(mode))
                figures[f"raw_{mode}"] = {
                    "seconds": round(raw_s, 3),
                    "judgements_per_s": rate(len(triples), raw_s),
                    "tokens": token_counts(outputs),
                }
                log.info("raw llm.chat %s: %.1fs", mode, raw_s)
    finally:
        close_engine(engine)
    return figures


# --- agreement --------------------------------------------------------------------------------------------------


def gap_to_raw(tl: dict[str, Any], raw: dict[str, Any] | None) -> dict[str, Any]:
    """Split juiz's (or the raw engine's) j/s ÷ TruLens j/s into two factors: more model work per judgement
    (uncached prompt tokens + output tokens, from the server's counters and from juiz's completions) × fewer tokens
    through the model per second (fewer requests in flight, per-request HTTP/JSON/TruLens overhead). Rough: a decode
    token costs more than a prefill token on this CPU, so the split leans on the token mix."""
    if raw is None:
        return {}
    server, tokens = tl["server"], raw["tokens"]
    work_tl = server["prompt_tokens_mean"] - server["cached_prompt_tokens_mean"] + server["output_tokens_mean"]
    work_raw = tokens["prompt_tokens_mean"] - tokens["cached_prompt_tokens_mean"] + tokens["output_tokens_mean"]
    tps_tl, tps_raw = tl["judgements_per_s"] * work_tl, raw["judgements_per_s"] * work_raw
    return {
        "work_tokens_per_judgement": {"trulens": round(work_tl, 1), "juiz": round(work_raw, 1)},
        "model_tokens_per_s": {"trulens": round(tps_tl, 1), "juiz": round(tps_raw, 1)},
        "juiz_over_trulens": ratio(raw["judgements_per_s"], tl["judgements_per_s"]),
        "factor_more_work_per_judgement": ratio(work_tl, work_raw),
        "factor_fewer_tokens_per_s": ratio(tps_raw, tps_tl),
    }


def trulens_digit(score: float | None) -> int | None:
    return None if score is None else round(score * 3)


def agreement(a: dict[str, int | None], b: dict[str, int | None]) -> dict[str, Any]:
    """Same 0-3 score and within one point, over the items both sides scored."""
    pairs = [(a[i], b[i]) for i in a.keys() & b.keys() if a[i] is not None and b[i] is not None]
    if not pairs:
        return {"pairs": 0, "same": None, "within_1": None}
    return {
        "pairs": len(pairs),
        "same": round(sum(x == y for x, y in pairs) / len(pairs), 3),
        "within_1": round(sum(abs(x - y) <= 1 for x, y in pairs) / len(pairs), 3),
    }


def scores(judgements: list[Judgement]) -> dict[str, int | None]:
    return {str(j.id): j.score for j in judgements}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--n", type=int, default=64, help="items (sequential TruLens runs ~0.2 judgements/s here)")
    parser.add_argument("--threads", default="1,8,16,32", help="TruLens concurrency settings; 1 is its default")
    parser.add_argument("--lang", default="en", choices=["en", "pt", "auto"], help="juiz prompt language")
    parser.add_argument(
        "--raw", action="store_true", help="also time raw llm.chat on the same conversations (engine_efficiency does)"
    )
    parser.add_argument(
        "--sequential-n",
        type=int,
        default=16,
        help="items for the 1-thread run (every k-th of the N, spread over the pool; it is the slowest run by far)",
    )
    args = parser.parse_args(argv)
    setup_logging()
    threads = [int(t) for t in args.threads.split(",")]
    triples = build_triples(args.n, "tl")
    warm = build_triples(WARMUP_ITEMS, "tl-warm")

    step = max(1, args.n // args.sequential_n)
    sequential = triple_dicts(triples)[::step][: args.sequential_n]
    trulens = measure_trulens(args.model, triple_dicts(triples), triple_dicts(warm), threads, sequential)
    juiz = measure_juiz(args.model, triples, warm, args.lang, with_raw=args.raw)

    default_k = 1 if 1 in trulens else threads[0]
    best_k = max(trulens, key=lambda k: trulens[k]["judgements_per_s"])
    tl_default = trulens[default_k]["judgements_per_s"]
    tl_best = trulens[best_k]["judgements_per_s"]
    cot, fast = juiz["cot"], juiz["fast"]
    ratios = {
        "cot_over_trulens_default": ratio(cot["judgements_per_s"], tl_default),
        "cot_over_trulens_best": ratio(cot["judgements_per_s"], tl_best),
        "fast_over_trulens_best": ratio(fast["judgements_per_s"], tl_best),
    }
    if "raw_cot" in juiz:
        raw = juiz["raw_cot"]["judgements_per_s"]
        ratios |= {
            "cot_over_raw_cot": ratio(cot["judgements_per_s"], raw),
            "trulens_best_over_raw_cot": ratio(tl_best, raw),
            "fast_over_raw_fast": ratio(fast["judgements_per_s"], juiz["raw_fast"]["judgements_per_s"]),
        }
    gap = gap_to_raw(trulens[best_k], juiz.get("raw_cot") or juiz["cot"])
    tl_scores = {k: {r["id"]: trulens_digit(r["score"]) for r in run["results"]} for k, run in trulens.items()}
    cot_scores, fast_scores = scores(cot["judgements"]), scores(fast["judgements"])
    expected_cot = [j.expected_score for j in cot["judgements"]]  # same items, same order
    expected_fast = [j.expected_score for j in fast["judgements"]]
    diffs = [abs(x - y) for x, y in zip(expected_cot, expected_fast, strict=True) if x is not None and y is not None]
    agreements: dict[str, Any] = {
        # TruLens's best run grades all N items (its 1-thread run only a spread subset).
        "trulens_vs_juiz_cot": agreement(tl_scores[best_k], cot_scores),
        "trulens_vs_juiz_fast": agreement(tl_scores[best_k], fast_scores),
        "juiz_fast_vs_juiz_cot": agreement(fast_scores, cot_scores),
        "juiz_fast_vs_cot_expected_score_mean_abs_diff": round(statistics.mean(diffs), 3) if diffs else None,
        "trulens_runs_same_score": {
            f"{k}_vs_{best_k}": agreement(tl_scores[k], tl_scores[best_k])["same"] for k in trulens if k != best_k
        },
        "score_distribution": {
            "trulens": dict(sorted(Counter(s for s in tl_scores[best_k].values() if s is not None).items())),
            "juiz_cot": dict(sorted(Counter(s for s in cot_scores.values() if s is not None).items())),
            "juiz_fast": dict(sorted(Counter(s for s in fast_scores.values() if s is not None).items())),
        },
    }

    print(f"\nTruLens 1.5.3 vs juiz — model {args.model}, N = {args.n}, juiz prompt {PROMPT}.{args.lang}")
    rows = [
        [
            f"TruLens, {k} thread(s)",
            run["judgements_per_s"],
            run["server"]["prompt_tokens_mean"],
            run["server"]["output_tokens_mean"],
            run["errors"],
        ]
        for k, run in trulens.items()
    ]
    for mode in ("cot", "fast"):
        raw_key = f"raw_{mode}"
        tokens = juiz[mode]["tokens"]
        rows.append(
            [
                f"juiz {mode}",
                juiz[mode]["judgements_per_s"],
                tokens.get("prompt_tokens_mean"),
                tokens.get("output_tokens_mean"),
                len(triples) - juiz[mode]["ok"],
            ]
        )
        if raw_key in juiz:
            rows.append([f"raw llm.chat {mode}", juiz[raw_key]["judgements_per_s"], None, None, None])
    print(table(rows, ["run", "j/s", "prompt tok", "output tok", "not ok"]))
    for key, value in ratios.items():
        target = TARGETS.get(key)
        print(f"{key}: {value}" + (f"  (target {'>' if target == 1.0 else '>='} {target})" if target else ""))
    if gap:
        print(
            f"juiz cot / TruLens best = {gap['juiz_over_trulens']}x = {gap['factor_more_work_per_judgement']}x "
            f"the model tokens per judgement (TruLens {gap['work_tokens_per_judgement']['trulens']} vs "
            f"{gap['work_tokens_per_judgement']['juiz']}) x {gap['factor_fewer_tokens_per_s']}x the "
            "tokens/s through the model (juiz / TruLens: requests in flight, HTTP, TruLens's own work)"
        )
    print(f"same 0-3 score, TruLens vs juiz cot: {agreements['trulens_vs_juiz_cot']['same']}")
    print(f"same 0-3 score, juiz fast vs juiz cot: {agreements['juiz_fast_vs_juiz_cot']['same']}")

    for mode in ("cot", "fast"):
        juiz[mode]["results"] = [
            {"id": j.id, "status": j.status.value, "score": j.score, "expected_score": j.expected_score}
            for j in juiz[mode].pop("judgements")
        ]
    payload = {
        "model": args.model,
        "n": args.n,
        "sequential_items": len(sequential),
        "trulens": {
            "version": "1.5.3",
            "method": "relevance_with_cot_reasons",
            "runs": {str(k): v for k, v in trulens.items()},
        },
        "juiz": {"prompt": f"{PROMPT}.{args.lang}", **juiz},
        "output_budget_tokens": COT_MAX_TOKENS,
        "default_threads": default_k,
        "best_threads": best_k,
        "ratios": ratios,
        "gap_trulens_best_to_juiz": gap,
        "targets": TARGETS,
        "agreement": agreements,
    }
    print(f"written: {save(NAME, payload)}")
    return payload


if __name__ == "__main__":
    main()
