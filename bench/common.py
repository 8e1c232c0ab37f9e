"""What every benchmark shares: the items, the in-process engine, token counts, and writing results.

Items: the seeds' triples, examples/judge_cases.jsonl and (where ../shared exists) TruLens's golden set, cycled to N.
Every item gets a unique id and a short tag in front of its question (`[n256-17] …`), so no two items of a run, and
no two runs, share a prompt beyond the system prompt: a prefix cache or a result cache left warm by one measurement
can never flatter the next one. The tag is the same for every side of a comparison.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import signal
import statistics
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from bench.machine import describe_machine
from juiz.engines.base import CallControl, Completion, Conversation, GenerationRequest, JudgeEngine
from juiz.engines.vllm_engine import VLLMEngine
from juiz.formats.readers import read_triples
from juiz.judging.backend import build_engine
from juiz.judging.plan import COT_REQUEST, FAST_REQUEST, select_prompt
from juiz.runtime.settings import Settings
from schemas import BatchOptions, Triple

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
WORK = REPO / "bench" / "work"  # logs of the servers the benchmarks start (git-ignored)
GOLDEN = REPO.parent / "shared" / "data" / "answer_relevance_golden_set.jsonl"


def add_nice_flag(parser: argparse.ArgumentParser) -> None:
    """--nice for benchmarks that run a stack beside their own load generator on a shared machine."""
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        help="scheduling priority for the stack and the load generator (e.g. -10, as root): on a machine shared with "
        "unrelated work, so that the run measures juiz rather than the other work's run queue; recorded",
    )


def base_triples() -> list[Triple]:
    """The pool items are cycled from, in a fixed order: seeds, juiz's cases, then the golden set if present."""
    pool = [t for p in sorted((REPO / "examples" / "seeds").glob("00*.txt")) for t in read_triples(p)]
    pool += read_triples(REPO / "examples" / "judge_cases.jsonl")
    if GOLDEN.exists():
        pool += read_triples(GOLDEN)
    return pool


def build_triples(n: int, tag: str) -> list[Triple]:
    """N distinct triples cycled deterministically from the pool; ids and question tags are `<tag>-<i>`."""
    pool = base_triples()
    items = []
    for i in range(n):
        base = pool[i % len(pool)]
        items.append(
            base.model_copy(update={"id": f"{tag}-{i}", "question": f"[{tag}-{i}] {base.question}", "context": None})
        )
    return items


def triple_dicts(triples: Sequence[Triple]) -> list[dict[str, Any]]:
    """Triples as the API takes them (no context: answer relevance does not read it, and it would only add bytes)."""
    return [{"id": t.id, "question": t.question, "answer": t.answer} for t in triples]


# The serving benchmarks (engine efficiency, prefix caching, small batches, the OpenAI back end, scale-out, API only)
# measure what a chain-of-thought grade costs and how juiz batches it, as they always have: they pin the CoT prompt.
# The check-based default (one token per check, two waves) has its own cost rows in bench.judge_quality.
COT_PROMPT = "answer_relevance@juiz-1"


def request_for(mode: str) -> GenerationRequest:
    return COT_REQUEST if mode == "cot" else FAST_REQUEST


def conversations(triples: Sequence[Triple], options: BatchOptions) -> list[Conversation]:
    """Exactly the conversations `Judge.grade` sends for these triples and options."""
    return [
        select_prompt(options, t.question).render(question=t.question, answer=t.answer, mode=options.mode)
        for t in triples
    ]


# --- the in-process engine ------------------------------------------------------------------------------------


def load_engine(model: str) -> VLLMEngine:
    """juiz's own in-process engine, built by the builder `juiz score` and the worker use (juiz.judging.backend: the
    JUIZ_* settings, `model` winning, and warmed up, so no measurement pays for compiling the reply grammar)."""
    engine = build_engine(Settings.from_env(None, engine="vllm", model=model), say=log.info)
    assert isinstance(engine, VLLMEngine)  # engine="vllm": the in-process back end
    log.info("engine %s ready in %.1fs", model, engine.startup_s)
    return engine


def load_judge_engine(model: str, engine: str) -> JudgeEngine:
    """`load_engine` for vLLM; any other back end (llamacpp) as `juiz score` builds it, on the model's GGUF."""
    if engine == "vllm":
        return load_engine(model)
    built = build_engine(Settings.from_env(None, engine=engine, model=model), say=log.info)
    log.info("engine %s (%s) ready", model, engine)
    return built


def reset_prefix_cache(engine: object) -> bool:
    """Empty the engine's prefix cache where it can (vLLM in process), so a measurement does not reuse the previous
    one's prompts; False where it can't (a server's)."""
    reset = getattr(engine, "reset_prefix_cache", None)
    return bool(reset()) if reset is not None else False


def close_engine(engine: object) -> None:
    """Stop the engine now (vLLM's engine-core process, llama.cpp's server), not at garbage collection, so the next
    engine has the CPU and memory."""
    try:
        getattr(engine, "close", lambda: None)()
    except Exception as exc:  # already gone: garbage collection will do the rest
        log.warning("engine shutdown: %s", exc)
    gc.collect()


def raw_chat(engine: VLLMEngine, convs: Sequence[Conversation], request: GenerationRequest) -> tuple[float, list[Any]]:
    """(seconds, vLLM RequestOutputs): the conversations straight through `vllm.LLM.chat`, in one call, with the
    SamplingParams juiz builds for `request` (structured-output regex and logprobs included)."""
    sampling = engine._sampling(request)
    started = time.perf_counter()
    outputs = engine._llm.chat(cast(Any, list(convs)), sampling, use_tqdm=False)
    return time.perf_counter() - started, outputs


class Recorder:
    """An engine, unchanged, keeping the completions of its last call (for their token counts)."""

    def __init__(self, engine: JudgeEngine) -> None:
        self.engine = engine
        self.last: list[Completion] = []

    @property
    def model_id(self) -> str:
        return self.engine.model_id

    @property
    def origin(self) -> Mapping[str, str]:
        return self.engine.origin

    def generate(
        self, conversations: Sequence[Conversation], request: GenerationRequest, control: CallControl | None = None
    ) -> list[Completion]:
        self.last = self.engine.generate(conversations, request, control)
        return self.last


def token_counts(outputs: Sequence[Any]) -> dict[str, float]:
    """Mean prompt, output and prefix-cached prompt tokens per item of a raw `llm.chat` run."""
    prompt = [len(o.prompt_token_ids or []) for o in outputs]
    output = [len(o.outputs[0].token_ids or []) for o in outputs]
    cached = [int(getattr(o, "num_cached_tokens", 0) or 0) for o in outputs]
    return {
        "prompt_tokens_mean": round(statistics.mean(prompt), 1),
        "output_tokens_mean": round(statistics.mean(output), 1),
        "output_tokens_max": max(output),
        "cached_prompt_tokens_mean": round(statistics.mean(cached), 1),
        "cut_at_max_tokens": sum(o.outputs[0].finish_reason == "length" for o in outputs),
    }


def completion_tokens(completions: Sequence[Completion]) -> dict[str, float]:
    """Mean prompt, prefix-cached prompt and output tokens per item of one juiz engine call."""
    return {
        "prompt_tokens_mean": round(statistics.mean(c.prompt_tokens for c in completions), 1),
        "cached_prompt_tokens_mean": round(statistics.mean(c.cached_prompt_tokens for c in completions), 1),
        "output_tokens_mean": round(statistics.mean(len(c.tokens) for c in completions), 1),
    }


# --- results ----------------------------------------------------------------------------------------------------


def results_dir() -> Path:
    """bench/results, or JUIZ_BENCH_RESULTS: `python -m bench --quick` writes elsewhere, so a smoke test never
    overwrites the committed figures."""
    return Path(os.environ.get("JUIZ_BENCH_RESULTS") or RESULTS)


def save(name: str, payload: dict[str, Any]) -> Path:
    """<results_dir>/<name>.json: the figures, the machine they came from and when."""
    results_dir().mkdir(parents=True, exist_ok=True)
    path = results_dir() / f"{name}.json"
    document = {
        "benchmark": name,
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": describe_machine(),
        **payload,
    }
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def rate(items: int, seconds: float) -> float:
    return round(items / seconds, 4) if seconds > 0 else float("nan")


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def table(rows: Sequence[Sequence[object]], header: Sequence[str]) -> str:
    """A plain fixed-width table for the terminal."""
    cells = [[str(h) for h in header]] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def setup_logging() -> None:
    # Every benchmark calls this first. Its children (API, workers holding vLLM engines) run in sessions of their
    # own and are stopped by `finally` blocks, which a plain SIGTERM skips: the engines then outlive the benchmark
    # (9 GiB each here). As SystemExit, SIGTERM unwinds through them.
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    for noisy in ("httpx", "vllm"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
