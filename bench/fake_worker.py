"""BENCHMARK-ONLY worker on a FAKE engine: `python -m bench.fake_worker` (for bench/api_only.py and bench/scale_out.py).

The same worker code as `juiz worker` (`workers.worker.run`: RQ, chunk claims, coalescing, result cache, storage),
with `juiz.fake_engine.FakeEngine` in place of vLLM, so the API and the queue are measured without a model. Its model id
says FAKE, and so does every result it stores. `juiz worker` itself never uses a fake.

A call can be given a cost, to model a GPU's: `JUIZ_FAKE_CALL_S` seconds per call plus `JUIZ_FAKE_ITEM_S` per item
(slept, honouring CallControl's deadline and cancel). With `JUIZ_FAKE_EVENTS=1` every call is recorded in Redis
(`bench:calls`: JSON with the worker's pid, the item count and wall-clock start/end) so a benchmark can see calls
start and end without polling the workers. `JUIZ_FAKE_CALLS_FILE=<path>` appends the same record, with the item
tags of the call's conversations (`[tag-17]`), to a file as one JSON line per finished call: a record that does not
need Redis, for a benchmark that stops Redis under the workers (bench/chaos.py counts items graded twice from it).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Sequence

from redis import Redis

from juiz.engine import CallControl, Completion, Conversation, GenerationRequest, aborted
from juiz.fake_engine import FakeEngine
from juiz.settings import Settings
from workers.worker import load_prompts, run

FAKE_MODEL_ID = "FAKE-engine (no model; benchmark of the API only)"
CALLS_KEY = "bench:calls"
HOLD_MARKER = "[bench-hold]"  # a call with such an item waits until RELEASE_KEY exists, at no cost
RELEASE_KEY = "bench:release"
# How a check prompt's question ends (prompts/*/checks-*.toml `reply_check`, en and pt).
YES_NO_ENDINGS = ("Yes or No.", "Sim ou Não.")
TAG = re.compile(r"\[([\w.-]+-\d+)\]")  # bench.common.build_triples's question tag


def fake_reply(conversation: Conversation) -> str:
    """A well-formed judge reply; the score varies with the item so results differ. A check prompt's yes/no question
    (the default prompts ask several per item) gets `p=<P(yes)>`, FakeEngine's word probabilities."""
    content = conversation[-1]["content"]
    score = sum(map(ord, content)) % 4
    if content.rstrip().endswith(YES_NO_ENDINGS):
        return f"p={(score + 1) / 4:.2f}"
    return f"Criteria: relevance\nSupporting Evidence: fake evidence, no model ran\nScore: {score}"


class CostlyFakeEngine(FakeEngine):
    """FAKE engine whose calls take call_s + item_s × items (a GPU's fixed and per-item costs, slept)."""

    def __init__(
        self, call_s: float, item_s: float, events: Redis | None = None, calls_file: str | None = None
    ) -> None:
        super().__init__(fake_reply, model_id=FAKE_MODEL_ID)
        self.call_s, self.item_s, self.events, self.calls_file = call_s, item_s, events, calls_file

    def generate(
        self, conversations: Sequence[Conversation], request: GenerationRequest, control: CallControl | None = None
    ) -> list[Completion]:
        started = time.time()
        if self.events is not None and any(HOLD_MARKER in c[-1]["content"] for c in conversations):
            self.events.rpush(CALLS_KEY, json.dumps({"pid": os.getpid(), "n": len(conversations), "hold": started}))
            while not self.events.exists(RELEASE_KEY):
                time.sleep(0.005)
            return super().generate(conversations, request)
        if self.events is not None:
            self.events.rpush(CALLS_KEY, json.dumps({"pid": os.getpid(), "n": len(conversations), "start": started}))
        end = time.monotonic() + self.call_s + self.item_s * len(conversations)
        abort: dict[int, str] = {}
        while (now := time.monotonic()) < end:
            if control is not None and control.deadline is not None and now >= control.deadline:
                abort = dict.fromkeys(range(len(conversations)), "timed out")
                break
            if control is not None and control.cancelled is not None:
                abort.update(dict.fromkeys(control.cancelled(), "cancelled"))
            time.sleep(min(end - now, control.poll_s if control is not None else end - now))
        completions = super().generate(conversations, request)
        for i, reason in abort.items():
            completions[i] = aborted(reason)
        record = {"pid": os.getpid(), "n": len(conversations), "start": started, "end": time.time()}
        if self.events is not None:
            self.events.rpush(CALLS_KEY, json.dumps(record))
        if self.calls_file is not None:
            tags = [m.group(1) for c in conversations if (m := TAG.search(c[-1]["content"]))]
            with open(self.calls_file, "a", encoding="utf-8") as f:
                f.write(json.dumps({**record, "aborted": len(abort), "tags": tags}) + "\n")
        return completions


def main() -> int:
    settings = Settings.from_env()
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    load_prompts()
    call_s = float(os.environ.get("JUIZ_FAKE_CALL_S", "0"))
    item_s = float(os.environ.get("JUIZ_FAKE_ITEM_S", "0"))
    events = Redis.from_url(settings.redis_url) if os.environ.get("JUIZ_FAKE_EVENTS") == "1" else None
    calls_file = os.environ.get("JUIZ_FAKE_CALLS_FILE") or None
    run(settings, CostlyFakeEngine(call_s, item_s, events, calls_file))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
