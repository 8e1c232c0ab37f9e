"""TEST-ONLY worker entry with a FAKE engine: `python -m tests.integration.fake_worker [--burst]`.

The real `juiz worker` never uses a fake. This one runs the same worker code (`workers.worker.run`) with
`CountingFakeEngine`, which replies after `JUIZ_FAKE_ENGINE_DELAY_S` seconds and counts, in Redis, how many times
each item was graded to completion — so a test can SIGKILL it mid-chunk and check that every item was graded once.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import time
from collections.abc import Sequence

from redis import Redis

from juiz.engine import Completion, Conversation, FakeEngine, GenerationRequest
from juiz.settings import Settings

GRADED_KEY = "fake-engine:graded"  # hash: item marker → completed gradings
STARTED_KEY = "fake-engine:started"  # counter: engine calls begun
ITEM_MARKER = re.compile(r"\[item-(\d+)\]")


def fake_reply(conversation: Conversation) -> str:
    """A well-formed judge reply whose score depends on the question, so results differ between items."""
    user = conversation[-1]["content"]
    markers = ITEM_MARKER.findall(user)
    score = int(markers[0]) % 4 if markers else 2
    return f"Criteria: relevance\nSupporting Evidence: fake evidence\nScore: {score}"


class CountingFakeEngine:
    """FAKE engine: FakeEngine's replies after a delay; completed gradings counted per `[item-N]` marker in Redis."""

    def __init__(self, redis: Redis, delay_s: float = 0.0, model_id: str = "fake-engine") -> None:
        self._fake = FakeEngine(fake_reply, model_id=model_id)
        self._redis = redis
        self.delay_s = delay_s

    @property
    def model_id(self) -> str:
        return self._fake.model_id

    @property
    def calls(self) -> list[int]:
        return self._fake.calls

    def generate(self, conversations: Sequence[Conversation], request: GenerationRequest) -> list[Completion]:
        self._redis.incr(STARTED_KEY)
        if self.delay_s:
            time.sleep(self.delay_s)
        completions = self._fake.generate(conversations, request)
        with self._redis.pipeline() as pipe:
            for conversation in conversations:
                for marker in ITEM_MARKER.findall(conversation[-1]["content"])[:1]:
                    pipe.hincrby(GRADED_KEY, marker, 1)
            pipe.execute()
        return completions


def main(argv: Sequence[str] | None = None) -> int:
    from workers.worker import run

    parser = argparse.ArgumentParser(prog="fake-worker")
    parser.add_argument("--burst", action="store_true")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    delay = float(os.environ.get("JUIZ_FAKE_ENGINE_DELAY_S", "0"))
    engine = CountingFakeEngine(Redis.from_url(settings.redis_url), delay_s=delay, model_id=settings.model)
    run(settings, engine, burst=args.burst)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
