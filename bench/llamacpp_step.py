"""llama.cpp's step (`n_batch`, JUIZ_LLAMACPP_BATCH_TOKENS) side by side: how fast the server computes a prompt, and
how long a streamed request waits between two reports of its prompt's progress, for each step size.

    flock /tmp/juiz-heavy.lock python -m bench.llamacpp_step                      # steps 2048 and 512, the judge
    flock /tmp/juiz-heavy.lock python -m bench.llamacpp_step --steps 2048,1024,512 --prompts 3

The prompts are the first conversations `juiz score` sends for the seeds (their check-based default: the references'
prompts, 1,300-1,500 tokens), each sent alone to slot 0 with `cache_prompt` off, so every run computes them whole.
The steps run in an A B B A order (one engine start each), so a drift in the machine's load falls on both. Writes
bench/results/llamacpp_step.json with the machine.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from typing import Any

import httpx

from bench.common import save
from bench.fake_worker import fake_reply
from bench.progress_line import SEEDS
from juiz.engines.base import Conversation
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


def one_prompt(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    """One streamed request: its prompt's tokens, seconds to its reply, and the waits between progress reports."""
    started = time.monotonic()
    marks = [started]
    prompt = 0
    streamed = {**body, "stream": True, "return_progress": True, "stream_options": {"include_usage": True}}
    with client.stream("POST", "/chat/completions", json=streamed) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            data = line.removeprefix("data:").strip()
            if not line.startswith("data:") or data == "[DONE]":
                continue
            chunk = json.loads(data)
            if chunk.get("prompt_progress"):
                marks.append(time.monotonic())
            prompt = int((chunk.get("usage") or {}).get("prompt_tokens") or prompt)
    marks.append(time.monotonic())
    waits = [b - a for a, b in itertools.pairwise(marks)]
    return {"prompt_tokens": prompt, "seconds": round(marks[-1] - started, 2), "longest_wait_s": round(max(waits), 2)}


def run_step(model: str, step: int, prompts: list[Conversation]) -> dict[str, Any]:
    engine = LlamaCppEngine(server_config(resolve_gguf(model), model, max_model_len=8192, batch_tokens=step))
    try:
        bodies = [
            engine.in_lane(engine.body(c, CHECK_REQUEST), 0) | {"cache_prompt": False, "top_logprobs": 1}
            for c in prompts
        ]
        with httpx.Client(base_url=engine.address + "/v1", timeout=1800.0) as client:
            runs = [one_prompt(client, body) for body in bodies]
    finally:
        engine.close()
    return {"step": step, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.llamacpp_step", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--steps", default="2048,512", help="step sizes to compare, the first one the reference")
    parser.add_argument("--prompts", type=int, default=2, help="seed conversations per run")
    args = parser.parse_args(argv)
    steps = [int(s) for s in args.steps.split(",")]
    prompts = seed_prompts(args.prompts)
    order = steps + steps[::-1]  # A B B A
    runs = [run_step(args.model, step, prompts) for step in order]
    figures: dict[str, Any] = {"model": args.model, "order": order, "steps": {}}
    for step in steps:
        mine = [r for run in runs if run["step"] == step for r in run["runs"]]
        tokens = sum(r["prompt_tokens"] for r in mine)
        seconds = sum(r["seconds"] for r in mine)
        figures["steps"][str(step)] = {
            "prompt_tokens_per_s": round(tokens / seconds, 1),
            "longest_progress_wait_s": max(r["longest_wait_s"] for r in mine),
            "median_prompt_s": round(statistics.median(r["seconds"] for r in mine), 2),
            "runs": mine,
        }
        print(f"step {step}: {figures['steps'][str(step)]}")
    reference = figures["steps"][str(steps[0])]["prompt_tokens_per_s"]
    for step in steps[1:]:
        speed = figures["steps"][str(step)]["prompt_tokens_per_s"]
        figures["steps"][str(step)]["speed_vs_first"] = round(speed / reference, 3)
        print(f"step {step}: {speed / reference:.3f} x the speed of step {steps[0]}")
    figures["cpu_flags"] = sorted(f for f in cpu_flags() if f.startswith(("avx", "amx", "fma", "f16c")))
    save("llamacpp_step", figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
