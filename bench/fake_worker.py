"""BENCHMARK-ONLY worker on a FAKE engine: `python -m bench.fake_worker` (used by bench/api_only.py).

The same worker code as `juiz worker` (`workers.worker.run`: RQ, leases, coalescing, result cache, storage), with
`juiz.engine.FakeEngine` in place of vLLM, so the API and the queue are measured without a model. Its model id
says FAKE, and so does every result it stores. `juiz worker` itself never uses a fake.
"""

from __future__ import annotations

import logging

from juiz.engine import Conversation, FakeEngine
from juiz.settings import Settings
from workers.worker import load_prompts, run

FAKE_MODEL_ID = "FAKE-engine (no model; benchmark of the API only)"


def fake_reply(conversation: Conversation) -> str:
    """A well-formed judge reply; the score varies with the item so results differ."""
    score = sum(map(ord, conversation[-1]["content"])) % 4
    return f"Criteria: relevance\nSupporting Evidence: fake evidence, no model ran\nScore: {score}"


def main() -> int:
    settings = Settings.from_env()
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    load_prompts()
    run(settings, FakeEngine(fake_reply, model_id=FAKE_MODEL_ID))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
