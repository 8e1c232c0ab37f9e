"""llama.cpp's step (`n_batch`, JUIZ_LLAMACPP_BATCH_TOKENS) side by side: how fast the server computes a prompt, and
how long a streamed request waits between two reports of its prompt's progress, for each step size.

    flock /tmp/juiz-heavy.lock python -m bench.llamacpp_step                      # steps 2048 and 512, the judge
    flock /tmp/juiz-heavy.lock python -m bench.llamacpp_step --steps 2048,1024,512 --prompts 3
    flock /tmp/juiz-heavy.lock python -m bench.llamacpp_step --steps 256 --repack          # repacked weights or not

The prompts are the first conversations `juiz score` sends for the seeds (their check-based default: the references'
prompts, 1,300-1,500 tokens), each asked as a one-token check through the engine, one at a time, streamed as the worker
streams it, with a nonce ahead of it so every run computes it whole.
With `--repack`, each step runs twice, without and with llama.cpp's repacked weights (`JUIZ_LLAMACPP_REPACK`), and each
run also writes 128 tokens (the references' decode). The runs go in an A B B A order (one engine start each), so a
drift in the machine's load falls on both. Writes bench/results/llamacpp_step[_NAME].json with the machine.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from typing import Any

from bench.common import save
from bench.fake_worker import fake_reply
from bench.progress_line import SEEDS
from juiz.engines.base import CallControl, Conversation, GenerationRequest
from juiz.engines.cpu import cpu_flags
from juiz.engines.fake import FakeEngine
from juiz.engines.llamacpp_engine import LlamaCppEngine, server_config
from juiz.engines.models import DEFAULT_MODEL, resolve_gguf
from juiz.formats.readers import read_triples
from juiz.judging.checks import CHECK_REQUEST
from juiz.judging.judge import Judge
from schemas import BatchOptions


def seed_prompts(n: int) -> list[Conversation]:
    """The first `n` distinct conversations the judge sends for the seeds (recorded on the FAKE engine)."""
    sent: list[Conversation] = []

    def reply(conversation: Conversation) -> str:
        if conversation not in sent:
            sent.append(conversation)
        return fake_reply(conversation)

    Judge(FakeEngine(reply)).grade(read_triples(SEEDS), BatchOptions())
    return sent[:n]


def one_prompt(engine: LlamaCppEngine, conversation: Conversation) -> dict[str, Any]:
    """One check through the engine as the worker sends it (streamed, someone listening): its prompt tokens computed,
    seconds to its reply, and the longest wait between two reports of its prompt's progress."""
    marks = [time.monotonic()]

    def heard(index: int, written: int, read: int) -> None:
        if read:
            marks.append(time.monotonic())

    (completion,) = engine.generate([conversation], CHECK_REQUEST, CallControl(on_tokens=heard))
    marks.append(time.monotonic())
    if completion.error is not None:
        raise RuntimeError(completion.error)
    waits = [b - a for a, b in itertools.pairwise(marks)]
    return {
        "prompt_tokens": completion.prompt_tokens - completion.cached_prompt_tokens,
        "seconds": round(marks[-1] - marks[0], 2),
        "longest_wait_s": round(max(waits), 2),
    }


def decode_speed(engine: LlamaCppEngine, tokens: int = 128) -> float:
    """Tokens written per second after a short new prompt."""
    story = [{"role": "user", "content": f"Run {time.time_ns()}. Tell a long story about a lighthouse keeper."}]
    began = time.monotonic()
    (completion,) = engine.generate([story], GenerationRequest(max_tokens=tokens, logprobs=0))
    return round(completion.reply_tokens / (time.monotonic() - began), 2)


def run_step(model: str, variant: str, prompts: list[Conversation], *, decode: bool) -> dict[str, Any]:
    """A server with this step (and repacked weights or not); each prompt made new (a nonce ahead of it), so none is
    served from a cache."""
    step, repack = int(variant.split("/")[0]), variant.endswith("/repack")
    config = server_config(resolve_gguf(model), model, max_model_len=8192, batch_tokens=step, repack=repack)
    engine = LlamaCppEngine(config)
    try:
        runs = []
        for conversation in prompts:
            nonce = f"Run {time.time_ns()}. "
            fresh = [{**conversation[0], "content": nonce + conversation[0]["content"]}, *conversation[1:]]
            runs.append(one_prompt(engine, fresh))
            if decode:
                runs[-1]["decode_tokens_per_s"] = decode_speed(engine)
    finally:
        engine.close()
    return {"variant": variant, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.llamacpp_step", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--steps", default="2048,512", help="step sizes to compare, the first one the reference")
    parser.add_argument("--prompts", type=int, default=2, help="seed conversations per run")
    parser.add_argument("--repack", action="store_true", help="each step without and with repacked weights")
    parser.add_argument("--name", default="", help="a suffix for the results file (e.g. the machine's kind)")
    args = parser.parse_args(argv)
    steps = args.steps.split(",")
    variants = [v for step in steps for v in ((step, step + "/repack") if args.repack else (step,))]
    prompts = seed_prompts(args.prompts)
    order = variants + variants[::-1]  # A B B A
    runs = [run_step(args.model, variant, prompts, decode=args.repack) for variant in order]
    figures: dict[str, Any] = {"model": args.model, "order": order, "steps": {}}
    for variant in variants:
        mine = [r for run in runs if run["variant"] == variant for r in run["runs"]]
        tokens = sum(r["prompt_tokens"] for r in mine)
        seconds = sum(r["seconds"] for r in mine)
        figures["steps"][variant] = {
            "prompt_tokens_per_s": round(tokens / seconds, 1),
            "longest_progress_wait_s": max(r["longest_wait_s"] for r in mine),
            "median_prompt_s": round(statistics.median(r["seconds"] for r in mine), 2),
            "runs": mine,
        }
        if args.repack:
            figures["steps"][variant]["decode_tokens_per_s"] = round(
                statistics.mean(r["decode_tokens_per_s"] for r in mine), 2
            )
        print(f"{variant}: {figures['steps'][variant]}")
    reference = figures["steps"][variants[0]]
    for variant in variants[1:]:
        mine = figures["steps"][variant]
        mine["speed_vs_first"] = round(mine["prompt_tokens_per_s"] / reference["prompt_tokens_per_s"], 3)
        if args.repack:
            mine["decode_vs_first"] = round(mine["decode_tokens_per_s"] / reference["decode_tokens_per_s"], 3)
        print(f"{variant}: {mine['speed_vs_first']:.3f} x the prompt speed of {variants[0]}")
    figures["cpu_flags"] = sorted(f for f in cpu_flags() if f.startswith(("avx", "amx", "fma", "f16c")))
    save("llamacpp_step" + (f"_{args.name}" if args.name else ""), figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
