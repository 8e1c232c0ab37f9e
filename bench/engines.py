"""The two CPU engines side by side in one run: vLLM (float32 where bf16 is emulated) and llama.cpp (the GGUF as it
ships), on the same items with the same judge.

Part 1, the dev split with the default judge (bench.labelled's first default cell): per engine, seconds per item,
prompt tokens per second (all prompt tokens of the cell, cached ones included, over its wall time), the prefix cache's
hit rate, peak RSS (the engine's whole process tree) and every agreement figure bench.judge_quality reports for the
cell. Part 2, `juiz
score` on the three seeds with the default engine (`auto`) and with `JUIZ_ENGINE=vllm`: wall time, start-up included,
and its ratio. Each engine runs in a child process of its own, one after the other (never two at once), so each
one's memory is its own.

    .venv/bin/python -m bench.engines [--limit N] [--model NAME] [--engines vllm,llamacpp] [--no-seeds]
        [--without-bf16] [--keep-results]

`--without-bf16` on a CPU with native bf16 stands in for one without it: vLLM runs float32 (`JUIZ_DTYPE=float32`,
what it picks there) and the seeds' "default engine" is llama.cpp (what `auto` picks there). It is a stand-in: this
CPU's float32 and llama.cpp kernels are AVX-512 ones, faster than an AVX2 CPU's; the results say so.

Hold the heavy lock: `flock /tmp/juiz-heavy.lock .venv/bin/python -m bench.engines --limit 4`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from bench.common import REPO, WORK, save, setup_logging, table
from bench.judge_quality import CountingEngine, cost_row, graded, rag_rows
from bench.labelled import CELLS, DEFAULT_CELLS, labelled_set
from juiz.engines.cpu import avx512, native_bf16
from juiz.engines.models import DEFAULT_MODEL
from juiz.judging.backend import build_engine, cuda_present
from juiz.judging.judge import Judge
from juiz.runtime.settings import Settings

log = logging.getLogger("bench.engines")

CELL = DEFAULT_CELLS[0]  # the default judge
ENGINES = ("vllm", "llamacpp")
# A row's keys that say what it is or what it cost (bench.judge_quality.cost_row); every other key is a figure.
NOT_FIGURES = {"cell", "metric", "prompt", "mode", "signal", "seconds_cell", "items", "per_segment"}


class PeakRss:
    """The highest summed RSS of this process and its descendants, sampled every `every_s` (vLLM's engine core is a
    child process; llama.cpp runs in this one)."""

    def __init__(self, every_s: float = 0.5) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._every = every_s
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for process in [me, *me.children(recursive=True)]:
                try:
                    total += process.memory_info().rss
                except psutil.Error:
                    continue
            self.peak = max(self.peak, total)
            self._stop.wait(self._every)

    def stop_gib(self) -> float:
        self._stop.set()
        self._thread.join()
        return round(self.peak / 2**30, 2)


def grade_one(engine_name: str, model: str, limit: int | None, out: Path) -> None:
    """Child: start `engine_name`, grade the dev split's subset with the default judge, write the figures to `out`."""
    setup_logging()
    rss = PeakRss()
    os.environ.setdefault("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "3600")  # as bench.judge_quality: a loaded CPU waits
    started = time.perf_counter()
    engine = build_engine(Settings.from_env(None, engine=engine_name, model=model), say=log.info)
    startup = time.perf_counter() - started
    counting = CountingEngine(engine)
    judge = Judge(counting)
    cell = CELLS[CELL]
    triples = labelled_set("dev", limit)
    results, seconds, counts = graded(counting, judge, cell, triples)
    cost = cost_row(counts, seconds, len(triples))
    rows = rag_rows(cell, triples, results, seconds)
    engine.close()
    document = {
        "engine": engine_name,
        "origin": dict(engine.origin),
        "startup_s": round(startup, 1),
        "items": len(triples),
        "seconds": round(seconds, 1),
        "s_per_item": cost["s_per_item"],
        "prompt_tokens_per_s": round(counts.get("prompt_tokens", 0) / seconds, 1) if seconds else None,
        "cost": cost,
        "peak_rss_gib": rss.stop_gib(),
        "rows": rows,
        "results": [r.model_dump(mode="json", exclude_none=True) for r in results],
    }
    out.write_text(json.dumps(document, ensure_ascii=False) + "\n", encoding="utf-8")


def _child(args: list[str], env: dict[str, str] | None = None, keep_stderr: bool = False) -> tuple[int, float, str]:
    """The child's exit code, wall seconds and, with `keep_stderr`, what it wrote to stderr (passed on to ours when it
    ends, not as it comes)."""
    started = time.perf_counter()
    stderr = subprocess.PIPE if keep_stderr else None
    done = subprocess.run(args, env=env, cwd=REPO, check=False, stderr=stderr, text=True)
    if keep_stderr:
        sys.stderr.write(done.stderr)
    return done.returncode, round(time.perf_counter() - started, 1), done.stderr or ""


def _seconds_after(pattern: str, text: str) -> float | None:
    """The seconds a line of `juiz score` gives after `pattern` (e.g. "graded in 424.9s"), or None."""
    found = re.search(pattern + r" ([\d.]+)s", text)
    return float(found.group(1)) if found else None


def seeds_score(engine: str | None, model: str, work: Path) -> dict[str, Any]:
    """`juiz score` on the three seeds (one JSONL), as a user runs it: start-up included; None: the default engine."""
    from juiz.formats.readers import read_triples

    seeds = work / "seeds.jsonl"
    triples = [t for p in sorted((REPO / "examples" / "seeds").glob("00*.txt")) for t in read_triples(p)]
    seeds.write_text("".join(t.model_dump_json() + "\n" for t in triples), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "JUIZ_ENGINE"}
    if engine is not None:
        env["JUIZ_ENGINE"] = engine
    env["JUIZ_MODEL"] = model
    out = work / f"seeds-{engine or 'auto'}.jsonl"
    argv = [sys.executable, "-m", "juiz.cli", "score", str(seeds), "-o", str(out)]
    code, seconds, said = _child(argv, env, keep_stderr=True)
    engines = set()
    labels = []
    if out.exists():
        for line in out.read_text(encoding="utf-8").splitlines():
            result = json.loads(line)
            labels.append(result.get("automated_label"))
            for metric in (result.get("metrics") or {}).values():
                provenance = metric.get("provenance") or {}
                engines.add(provenance.get("engine") or f"vllm {provenance.get('engine_dtype')}")
    return {
        "engine": engine or "auto",
        "exit": code,
        "seconds": seconds,
        "ready_s": _seconds_after("engine ready in", said),
        "grading_s": _seconds_after("graded in", said),
        "labels": labels,
        "graded_by": sorted(engines),
    }


COST_KEYS = set(cost_row({}, 1.0, 1)) | {"cold_prefix_cache"}


def agreement(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """metric/signal → the figures, for the side-by-side table."""
    return {
        f"{r['metric']}/{r['signal']}": {k: v for k, v in r.items() if k not in NOT_FIGURES and k not in COST_KEYS}
        for r in rows
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="grade a spread subset of N dev items")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--engines", default=",".join(ENGINES), help="comma-separated, from vllm, llamacpp")
    parser.add_argument("--no-seeds", action="store_true", help="skip `juiz score` on the seeds")
    parser.add_argument(
        "--without-bf16", action="store_true", help="on a bf16 CPU, run as auto and vllm do on a CPU without it"
    )
    parser.add_argument(
        "--keep-results", action="store_true", help="keep every graded result in the file (to compare grades)"
    )
    parser.add_argument(
        "--seeds-engine",
        choices=ENGINES,
        default=None,
        help="the seeds' first run on this engine instead of auto's pick (to check the pick on a new CPU)",
    )
    parser.add_argument("--name", default=None, help="a suffix for the results file (e.g. the CPU)")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # child: one engine
    parser.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        grade_one(args.one, args.model, args.limit, args.out)
        return 0
    setup_logging()
    WORK.mkdir(parents=True, exist_ok=True)
    engines = [e for e in args.engines.split(",") if e]
    per_engine: dict[str, Any] = {}
    seeds: list[dict[str, Any]] = []
    name = ("engines_dev" if engines else "engines_seeds") + (f"_limit{args.limit}" if args.limit and engines else "")
    if args.without_bf16:
        name += "_without_bf16"  # a stand-in on a CPU that has bf16
    elif not (cuda_present() or native_bf16()):
        # the real thing: a machine's figures don't overwrite another kind's
        name += "_no_bf16_cpu" if avx512() else "_avx2_cpu"
    if args.name:
        name += f"_{args.name}"
    default_engine: str | None = args.seeds_engine
    if args.without_bf16:
        os.environ["JUIZ_DTYPE"] = "float32"  # the children (and `juiz score`) inherit it; llama.cpp ignores it
        default_engine = "llamacpp"

    def write() -> Path:
        side = {e: agreement(doc["rows"]) for e, doc in per_engine.items() if "rows" in doc}
        summary = {
            e: {k: doc.get(k) for k in ("origin", "startup_s", "items", "s_per_item", "prompt_tokens_per_s")}
            | {
                "peak_rss_gib": doc.get("peak_rss_gib"),
                "prefix_cache_hit_rate": doc.get("cost", {}).get("prefix_cache_hit_rate"),
            }
            for e, doc in per_engine.items()
        }
        ratio = None
        if len(seeds) == 2 and all(s["exit"] == 0 for s in seeds):
            ratio = round(seeds[0]["seconds"] / seeds[1]["seconds"], 3)
        return save(
            name,
            {
                "model": args.model,
                "cell": CELL,
                "limit": args.limit,
                "stand_in": (
                    "a CPU without native bf16, emulated on this one: vLLM float32, auto = llama.cpp; this CPU's "
                    "AVX-512 kernels are faster than an AVX2 CPU's"
                )
                if args.without_bf16
                else None,
                "summary": summary,
                "agreement": side,
                "seeds_score": seeds,
                "seeds_auto_over_vllm": ratio,
                "seeds_first_engine": default_engine or "auto",
                "per_engine": {
                    e: {k: v for k, v in d.items() if k != "results" or args.keep_results}
                    for e, d in per_engine.items()
                },
            },
        )

    with tempfile.TemporaryDirectory(dir=WORK) as tmp:
        work = Path(tmp)
        for engine in engines:
            out = work / f"{engine}.json"
            argv_child = [sys.executable, "-m", "bench.engines", "--one", engine, "--out", str(out)]
            argv_child += ["--model", args.model] + (["--limit", str(args.limit)] if args.limit else [])
            code, seconds, _ = _child(argv_child)
            per_engine[engine] = json.loads(out.read_text()) if code == 0 and out.exists() else {"exit": code}
            per_engine[engine]["wall_s"] = seconds
            path = write()
            log.info("%s: %s", engine, {k: v for k, v in per_engine[engine].items() if k not in ("rows", "results")})
        if not args.no_seeds:
            for engine in (default_engine, "vllm"):
                seeds.append(seeds_score(engine, args.model, work))
                log.info("juiz score on the seeds: %s", seeds[-1])
                path = write()
    document = json.loads(path.read_text())
    rows = [
        [e, *(s.get(k) for k in ("startup_s", "s_per_item", "prompt_tokens_per_s", "peak_rss_gib"))]
        for e, s in document["summary"].items()
    ]
    print(table(rows, ["engine", "start-up s", "s/item", "prompt tok/s", "peak RSS GiB"]))
    keys = sorted({k for side in document["agreement"].values() for k in side})
    rows = [[k, *(json.dumps(document["agreement"].get(e, {}).get(k)) for e in engines)] for k in keys]
    print(table(rows, ["metric/signal", *engines]))
    print(f"seeds: {document['seeds_score']} auto/vllm = {document['seeds_auto_over_vllm']}")
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
