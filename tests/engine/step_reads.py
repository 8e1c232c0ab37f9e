"""TEST-ONLY: the tiny model with 128-token engine steps, in a process of its own (vLLM leaves a second engine's
ZMQ context to the garbage collector, which would warn inside whichever test runs next).

`python -m tests.engine.step_reads` grades three one-token replies to ~600-token prompts with someone listening for
tokens and prints, as one JSON object, each reply's prompt and cached prompt tokens and what the listener heard."""

from __future__ import annotations

import json

from juiz.engines.base import CallControl, GenerationRequest
from juiz.engines.models import TEST_MODEL, model_dir
from juiz.engines.vllm_engine import VLLMEngine


def main() -> None:
    engine = VLLMEngine(str(model_dir(TEST_MODEL)), model_id=TEST_MODEL, max_model_len=2048, cpu_step_tokens=128)
    heard: dict[int, list[tuple[int, int]]] = {0: [], 1: [], 2: []}  # index → (tokens written, prompt tokens read)
    control = CallControl(on_tokens=lambda index, written, read: heard[index].append((written, read)))
    filler = "Rivers carry water, silt and stories from the hills down to the sea. " * 40
    prompts = [[{"role": "user", "content": f"Prompt {n} of three. {filler} Is {n} even?"}] for n in range(3)]
    try:
        results = engine.generate(prompts, GenerationRequest(max_tokens=1, logprobs=0), control)
    finally:
        engine.close()
    replies = [{"error": r.error, "prompt": r.prompt_tokens, "cached": r.cached_prompt_tokens} for r in results]
    print(json.dumps({"replies": replies, "heard": heard}), flush=True)


if __name__ == "__main__":
    main()
