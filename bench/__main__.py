"""`python -m bench` (`make bench`): every benchmark in sequence, within an hour on a 2-core CPU, then one table.

Each benchmark runs in a process of its own (one vLLM engine at a time, nothing left behind by the previous one) and
writes bench/results/<name>.json; the table below is read back from those files.

    .venv/bin/python -m bench [--model NAME] [--only a,b] [--quick | --full]

--quick: tiny sizes on the test model (smollm2-135m-instruct), a smoke test of the plumbing in a few minutes; its
figures say nothing about performance. --full: the issue's larger sizes for the engine benchmarks (N=256, TruLens
at 64 items and 64 threads), well over an hour here.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import WORK, exit_on_sigterm, results_dir, save, table
from juiz.engines.models import DEFAULT_MODEL, TEST_MODEL

# name → (arguments of `make bench`, arguments for --quick). `make bench` must fit an hour on a 2-core CPU, so the
# slowest engine benchmarks run at their smaller sizes there; --full adds the larger ones (FULL).
BENCHMARKS: dict[str, tuple[list[str], list[str]]] = {
    "api_only": ([], ["--items", "1000", "--clients", "10", "--seconds", "5"]),
    "engine_efficiency": (["--sizes", "64"], ["--sizes", "4,8"]),
    "small_batches": ([], ["--clients", "4", "--items", "2"]),
    "prefix_caching": (["--n", "32", "--modes", "fast"], ["--n", "8", "--modes", "fast"]),
    "trulens_peer": (["--n", "32", "--threads", "1,16", "--sequential-n", "4"], ["--n", "6", "--threads", "1,4"]),
    "openai_backend": (["--n", "32"], ["--n", "6"]),
    "cpu_dtype": ([], ["--items", "1"]),  # the CPU engine in bf16 and in float32 (juiz.engines.vllm_engine.cpu_dtype)
    "on_paper": ([], []),  # arithmetic from the token counts measured above; no engine
    "scale_out": ([], ["--workers", "1,2", "--batches", "2", "--no-recovery"]),  # FAKE engine, 1/2/4/8 processes
    # issue 17, FAKE engine: Redis restarted 20 times under a 2,000-item batch; a small batch behind a 40×256 backlog;
    # 20 concurrent order=uncertain pages of a 10k batch
    "chaos": ([], ["--items", "300", "--restarts", "3", "--item-s", "0.02"]),
    "fairness": ([], ["--deep", "6", "--shallow", "2"]),
    "uncertain_pages": ([], ["--items", "1000", "--seconds", "3"]),
    # issue 8: agreement with manual labels on the labelled RAG set's test split (and TruLens's golden set)
    "judge_quality": ([], ["--quick", "--cells", "cot-v2,fast-v2", "--no-golden"]),
}
FULL: dict[str, list[str]] = {
    "engine_efficiency": ["--sizes", "64,256"],
    "trulens_peer": ["--n", "64", "--threads", "1,16,64", "--sequential-n", "8"],
    "openai_backend": ["--n", "64"],
}
USES_MODEL = {
    "engine_efficiency",
    "small_batches",
    "prefix_caching",
    "trulens_peer",
    "openai_backend",
    "cpu_dtype",
    "judge_quality",
}


RESULT_FILES = {"judge_quality": "judge_quality_test"}  # benchmarks whose results file is not named after them


def load(name: str) -> dict[str, Any] | None:
    path = results_dir() / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def verdict(value: float | None, target: float, *, above: bool = True, strict: bool = False) -> str:
    if value is None:
        return "-"
    margin = value - target if above else target - value
    return "met" if margin > 0 or (margin == 0 and not strict) else "NOT met"


def summary_rows(results: dict[str, dict[str, Any]]) -> list[list[object]]:
    rows: list[list[object]] = []
    if r := results.get("engine_efficiency"):
        for n, s in r["sizes"].items():
            rows.append(
                [
                    f"engine N={n}",
                    "raw / juiz / service j/s",
                    f"{s['raw']['judgements_per_s']} / {s['juiz']['judgements_per_s']} / "
                    f"{s.get('service', {}).get('judgements_per_s', '-')}",
                    "",
                    "",
                ]
            )
            rows.append(
                [f"engine N={n}", "(b)/(a) juiz/raw", s["juiz_over_raw"], ">= 0.95", verdict(s["juiz_over_raw"], 0.95)]
            )
            rows.append(
                [
                    f"engine N={n}",
                    "(c)/(a) service/raw",
                    s.get("service_over_raw"),
                    ">= 0.95",
                    verdict(s.get("service_over_raw"), 0.95),
                ]
            )
            rows.append(
                [
                    f"engine N={n}",
                    "prompt / output tokens per item",
                    f"{s['tokens']['prompt_tokens_mean']} / {s['tokens']['output_tokens_mean']}",
                    "",
                    "",
                ]
            )
    if r := results.get("small_batches"):
        rows.append(
            [
                "small batches",
                f"{r['clients']}x{r['items_per_client']} vs 1x{r['clients'] * r['items_per_client']} j/s",
                f"{r['runs']['many']['judgements_per_s']} vs {r['runs']['single']['judgements_per_s']}",
                "",
                "",
            ]
        )
        rows.append(["small batches", "ratio", r["many_over_single"], ">= 0.9", verdict(r["many_over_single"], 0.9)])
    if r := results.get("trulens_peer"):
        runs = r["trulens"]["runs"]
        rows.append(
            [
                "vs TruLens",
                "TruLens j/s by threads",
                ", ".join(f"{k}: {v['judgements_per_s']}" for k, v in runs.items()),
                "",
                "",
            ]
        )
        rows.append(
            [
                "vs TruLens",
                "juiz cot / fast j/s",
                f"{r['juiz']['cot']['judgements_per_s']} / {r['juiz']['fast']['judgements_per_s']}",
                "",
                "",
            ]
        )
        q = r["ratios"]
        rows.append(
            [
                "vs TruLens",
                "cot / TruLens default",
                q["cot_over_trulens_default"],
                ">= 4",
                verdict(q["cot_over_trulens_default"], 4.0),
            ]
        )
        rows.append(
            [
                "vs TruLens",
                f"cot / TruLens best ({r['best_threads']} threads)",
                q["cot_over_trulens_best"],
                "> 1",
                verdict(q["cot_over_trulens_best"], 1.0, strict=True),
            ]
        )
        rows.append(
            [
                "vs TruLens",
                "fast / TruLens best",
                q["fast_over_trulens_best"],
                ">= 5",
                verdict(q["fast_over_trulens_best"], 5.0),
            ]
        )
        a = r["agreement"]
        rows.append(
            [
                "vs TruLens",
                "same score TruLens/juiz cot; fast/cot",
                f"{a['trulens_vs_juiz_cot']['same']}; {a['juiz_fast_vs_juiz_cot']['same']}",
                "",
                "",
            ]
        )
    if r := results.get("openai_backend"):
        a = r["agreement"]
        rows.append(
            [
                f"OpenAI server back end, N={r['n']}",
                "in process / server j/s; server ÷ in process",
                f"{r['in_process']['judgements_per_s']} / {r['server']['judgements_per_s']}; "
                f"{r['server_over_in_process']}",
                "",
                "",
            ]
        )
        rows.append(
            [f"OpenAI server back end, N={r['n']}", "same score; within one", f"{a['same']}; {a['within_one']}", "", ""]
        )
    if r := results.get("prefix_caching"):
        for mode, m in r["modes"].items():
            rows.append(
                [
                    f"prefix cache {mode}",
                    "2nd/1st pass; cold/warm same items",
                    f"{m['second_over_first_speedup']}x; {m['cache_speedup_same_items']}x",
                    "",
                    "",
                ]
            )
            if "block_size_speedup" in m:
                rows.append(
                    [
                        f"prefix cache {mode}",
                        f"block {r['block_size']} vs {r['compared_block_size']}, same cold pass",
                        f"{m['block_size_speedup']}x",
                        "",
                        "",
                    ]
                )
    if r := results.get("on_paper"):
        for e in r["estimates"]:
            rows.append(
                [
                    f"on paper: {e['workload']['name']}",
                    "1 H100 / 64 H100 j/s (8B judge)",
                    f"{'-'.join(map(str, e['one_h100_judgements_per_s']))} / "
                    f"{'-'.join(map(str, e['cluster_judgements_per_s']))}",
                    "",
                    e["bound"],
                ]
            )
    if r := results.get("scale_out"):
        for case, per_w in r["cases"].items():
            rows.append(
                [
                    f"scale-out {case} (FAKE)",
                    "speed-up (ideal) by workers",
                    ", ".join(f"{w}: {x['speedup']} ({x['ideal_speedup']})" for w, x in per_w.items()),
                    ">= 0.9 ideal",
                    verdict(min(x["efficiency"] for x in per_w.values()), r["target_efficiency"]),
                ]
            )
        if rec := r.get("recovery"):
            rows.append(
                [
                    "recovery (FAKE)",
                    "SIGKILL mid-call → taken over / done, s",
                    f"{rec['kill_to_takeover_s']} / {rec['kill_to_done_s']}",
                    "< 60",
                    verdict(rec["kill_to_takeover_s"], 60.0, above=False, strict=True),
                ]
            )
    if r := results.get("chaos"):
        steady = r["polls"]["steady"]
        rows.append(
            [
                "Redis restarts (FAKE)",
                f"{r['restarts_during_batch']} restarts, {r['items']} items, {r['workers_alive']} workers alive",
                f"{r['batch_status']}; {r['missing']} missing, {r['stored_twice']} twice",
                "done, every item once",
                "met" if r["targets_met"]["batch_done"] and r["targets_met"]["every_item_once"] else "NOT met",
            ]
        )
        rows.append(
            [
                "Redis restarts (FAKE)",
                "poll 5xx recovering / ≥ 1 s after",
                f"{r['polls']['recovering']['http_5xx']} / {steady['http_5xx']}",
                "0 after",
                verdict(steady["http_5xx"], 0, above=False),
            ]
        )
    if r := results.get("fairness"):
        for case, c in r["cases"].items():
            rows.append(
                [
                    f"fairness {case} (FAKE)",
                    f"B's {c['b_items']} items behind {c['a_items_queued']}: calls; s",
                    f"{c['b_engine_calls_to_done']}; {c['b_seconds_to_done']}",
                    f"<= {r['target_engine_calls']} calls",
                    verdict(c["b_engine_calls_to_done"], r["target_engine_calls"], above=False),
                ]
            )
    if r := results.get("uncertain_pages"):
        for limit, u in r["runs"].items():
            loaded = u["loaded"]
            rows.append(
                [
                    f"uncertain pages of {limit} (FAKE)",
                    f"{r['clients']} readers: API RSS growth MiB",
                    loaded["api_rss_mib"]["growth_peak"],
                    f"< {r['targets']['rss_growth_mib']}",
                    verdict(loaded["api_rss_mib"]["growth_peak"], r["targets"]["rss_growth_mib"], above=False),
                ]
            )
            rows.append(
                [
                    f"uncertain pages of {limit} (FAKE)",
                    "other tenant's poll p99 quiet / loaded ms",
                    f"{u['quiet']['other_poll']['p99_ms']} / {loaded['other_poll']['p99_ms']}",
                    f"< {r['targets']['other_poll_p99_ms']}",
                    verdict(loaded["other_poll"]["p99_ms"], r["targets"]["other_poll_p99_ms"], above=False),
                ]
            )
    if r := results.get("judge_quality"):
        for row in r["rows"]:
            if row.get("metric") == "verdict" or row.get("cell") == "cot-v1":
                rows.append(
                    [
                        f"quality {row['cell']} {row['metric']} ({row.get('signal', '')})",
                        "acc / quadratic κ / Spearman ρ",
                        f"{row.get('accuracy')} / {row.get('kappa_quadratic')} / {row.get('spearman')}",
                        ">= 0.75" if row.get("metric") == "verdict" else "",
                        verdict(row.get("spearman"), 0.75) if row.get("metric") == "verdict" else "",
                    ]
                )
    if r := results.get("api_only"):
        p = r["polling"]
        rows.append(
            [
                "API (FAKE engine)",
                f"POST {r['items']} items, s",
                r["post_seconds"],
                "< 1",
                verdict(r["post_seconds"], 1.0, above=False, strict=True),
            ]
        )
        rows.append(
            [
                "API (FAKE engine)",
                f"{p['clients']} pollers p50 / p99 ms",
                f"{p['p50_ms']} / {p['p99_ms']}",
                "p99 < 50",
                verdict(p["p99_ms"], 50.0, above=False, strict=True),
            ]
        )
        rows.append(["API (FAKE engine)", "poll errors", p["errors"], "0", verdict(p["errors"], 0, above=False)])
        rows.append(
            [
                "API (FAKE engine)",
                f"page all {r['items']} results, s",
                " / ".join(f"{x['seconds']} ({x['page_size']}/page)" for x in r["paging"]),
                "",
                "",
            ]
        )
    return rows


def record_duration(model: str, quick: bool, name: str, seconds: float) -> None:
    """durations.json: per benchmark, the seconds of its latest run, written as each one ends (a partial `--only`
    run updates its own entries); the total is what `python -m bench` takes at these sizes, start-ups included."""
    previous = load("durations") or {}
    durations = dict(previous.get("seconds", {})) if previous.get("model") == model else {}
    durations[name] = round(seconds)
    save("durations", {"model": model, "quick": quick, "seconds": durations, "total_s": sum(durations.values())})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help=f"judge model (default {DEFAULT_MODEL}; --quick: {TEST_MODEL})")
    parser.add_argument("--only", default=",".join(BENCHMARKS), help="comma-separated benchmark names")
    parser.add_argument("--quick", action="store_true", help="tiny sizes on the test model: plumbing only")
    parser.add_argument("--full", action="store_true", help="the issue's larger sizes too (well over an hour on CPU)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, exit_on_sigterm)  # so a stopped run stops the benchmark it is running (below)
    model = args.model or (TEST_MODEL if args.quick else DEFAULT_MODEL)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")

    if args.quick:
        os.environ["JUIZ_BENCH_RESULTS"] = str(WORK / "quick-results")  # inherited by every benchmark's process
    durations: dict[str, float] = {}
    failed: list[str] = []
    for name in names:
        standard, quick = BENCHMARKS[name]
        sizes = quick if args.quick else FULL.get(name, standard) if args.full else standard
        command = [sys.executable, "-m", f"bench.{name}", *sizes]
        if name in USES_MODEL:
            command += ["--model", model]
        print(f"\n=== {name}: {' '.join(command[1:])}", flush=True)
        started = time.perf_counter()
        with subprocess.Popen(command, cwd=Path(__file__).resolve().parent.parent) as process:
            try:
                code = process.wait()
            except BaseException:
                # Stopped (SIGTERM, Ctrl-C): the benchmark gets SIGTERM, so it stops its own children, not SIGKILL.
                process.terminate()
                process.wait()
                raise
        durations[name] = time.perf_counter() - started
        if code != 0:
            failed.append(name)
            print(f"=== {name} FAILED (exit {code})", flush=True)
        else:
            record_duration(model, args.quick, name, durations[name])

    loaded = {name: load(RESULT_FILES.get(name, name)) for name in names if name not in failed}
    results = {name: r for name, r in loaded.items() if r is not None}
    print(f"\n=== summary — model {model}" + (" (QUICK: plumbing only, not performance)" if args.quick else ""))
    print(table(summary_rows(results), ["benchmark", "figure", "value", "target", ""]))
    print(
        "\n"
        + table(
            [[n, f"{s:.0f}"] for n, s in durations.items()] + [["total", f"{sum(durations.values()):.0f}"]],
            ["benchmark", "seconds"],
        )
    )
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
