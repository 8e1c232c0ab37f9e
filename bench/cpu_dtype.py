"""The CPU engine in bfloat16 and in float32, side by side in one run: seconds for the same check conversations and
how far the two dtypes' P(yes) lie apart.

    .venv/bin/python -m bench.cpu_dtype [--items 3] [--model qwen2.5-coder-1.5b-instruct]

Why: vLLM's CPU kernels compute bf16 natively only with AVX-512 BF16 or AMX; on other x86 CPUs (AVX2, or AVX-512
without BF16) bf16 is emulated. `juiz.engines.vllm_engine.cpu_dtype` then runs the model in float32 (`JUIZ_DTYPE`
overrides).
Each dtype gets its own engine, one after the other, the same conversations (one answer-relevance check of the first
`--items` dev items, each with the first segment of its context, a few hundred tokens: prefill-bound, as check-based
grading is, and short enough that an emulated-bf16 step stays inside vLLM's 300 s step timeout: a whole context did
not, on a 2-core AVX2 CPU); the first conversation warms the engine and is not timed. Writes
bench/results/cpu_dtype.json with the CPU's bf16 flags.
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

import prompts
from bench.common import ratio, save, setup_logging
from bench.labelled import labelled_set
from juiz.engines.base import Conversation
from juiz.engines.cpu import NATIVE_BF16_FLAGS, cpu_flags
from juiz.engines.models import resolve_model
from juiz.engines.vllm_engine import VLLMEngine
from juiz.judging.checks import CHECK_REQUEST, CheckJob
from juiz.judging.judge import context_segments
from juiz.runtime.settings import DEFAULT_MODEL

log = logging.getLogger("bench.cpu_dtype")


def check_conversations(items: int) -> list[Conversation]:
    """answers_question for each of the first `items` dev items (plus one to warm up), as the judge renders it, with
    the first segment of the item's context only."""
    template = prompts.load("answer_relevance", prompts.DEFAULT_VERSIONS["answer_relevance"], "en")
    check = next(c for c in template.checks if c.name == "answers_question")
    conversations = []
    for triple in labelled_set("dev", None)[: items + 1]:
        segments = context_segments(triple.context)[:1]
        fields = {"question": triple.question, "answer": triple.answer, "context": prompts.format_context(segments)}
        job = CheckJob.plan(0, "answer_relevance", template, fields, segments)
        conversations.append(template.render_check(check, **job.fields))
    return conversations


def timed(model: str, dtype: str, conversations: list[Conversation]) -> dict[str, Any]:
    engine = VLLMEngine(resolve_model(model), model_id=model, dtype=dtype)
    try:
        engine.generate(conversations[:1], CHECK_REQUEST)
        started = time.perf_counter()
        completions = engine.generate(conversations[1:], CHECK_REQUEST)
        seconds = time.perf_counter() - started
    finally:
        engine.close()
    p_yes = [
        round(c.word_probs[0] / (c.word_probs[0] + c.word_probs[1]), 4) if c.word_probs and sum(c.word_probs) else None
        for c in completions
    ]
    log.info("%s: %d items in %.1fs", dtype, len(completions), seconds)
    return {"dtype": dtype, "startup_s": round(engine.startup_s, 1), "seconds": round(seconds, 1), "p_yes": p_yes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=3)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    args = parser.parse_args(argv)
    setup_logging()
    conversations = check_conversations(args.items)
    runs = {dtype: timed(args.model, dtype, conversations) for dtype in ("float32", "bfloat16")}
    pairs = [
        (a, b) for a, b in zip(runs["float32"]["p_yes"], runs["bfloat16"]["p_yes"], strict=True) if None not in (a, b)
    ]
    out = {
        "model": args.model,
        "items": args.items,
        "cpu_bf16_flags": sorted(NATIVE_BF16_FLAGS & cpu_flags()),
        "runs": runs,
        "bf16_over_float32_seconds": ratio(runs["bfloat16"]["seconds"], runs["float32"]["seconds"]),
        "max_abs_p_yes_difference": round(max((abs(a - b) for a, b in pairs), default=0.0), 4),
    }
    print(
        f"bf16 flags {out['cpu_bf16_flags'] or 'none'}: float32 {runs['float32']['seconds']}s, bfloat16 "
        f"{runs['bfloat16']['seconds']}s for {args.items} items (bf16 / float32 = {out['bf16_over_float32_seconds']}); "
        f"P(yes) differs by at most {out['max_abs_p_yes_difference']}"
    )
    save("cpu_dtype", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
