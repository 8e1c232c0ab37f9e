"""TEST-ONLY stand-in for a `juiz worker`: builds the real VLLMEngine on the tiny model and grades until killed.

`python -m tests.engine.engine_owner` prints `engine <pid> <pid> ...` (its engine's processes) once the engine is up,
then `generating` right before each call, and never returns on its own.
"""

from __future__ import annotations

from juiz.engines.base import GenerationRequest
from juiz.engines.models import TEST_MODEL, model_dir
from juiz.engines.vllm_engine import VLLMEngine


def main() -> None:
    engine = VLLMEngine(str(model_dir(TEST_MODEL)), model_id=TEST_MODEL, max_model_len=1024)
    print("engine", *engine.engine_pids, flush=True)
    conversations = [[{"role": "user", "content": f"Count from {i} to 1000, one number per line."}] for i in range(8)]
    while True:  # mid-call whenever the test strikes
        print("generating", flush=True)
        engine.generate(conversations, GenerationRequest(max_tokens=900, logprobs=0))


if __name__ == "__main__":
    main()
