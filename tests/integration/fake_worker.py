"""TEST-ONLY worker entry with a FAKE engine: `python -m tests.integration.fake_worker [--burst]`.

The real `juiz worker` never uses a fake. This one runs the same worker code (`workers.worker.run`) with
`CountingFakeEngine`, which replies after `JUIZ_FAKE_ENGINE_DELAY_S` seconds and counts, in Redis, how many times
each item was graded to completion — so a test can SIGKILL it mid-chunk and check that every item was graded once.
While it waits it honours `CallControl` (cancelled items are aborted at once) and records the items of the running
call under `fake-engine:running` so a test can act mid-call on an event, not after a sleep.
`JUIZ_FAKE_ENGINE_DEAD=1` makes it raise EngineDeadError on every call (an engine whose process died).
With `JUIZ_FAKE_ENGINE_EVENTS=<dir>` it also creates `<dir>/call-<n>-done` when a call's delay is over, before its
own Redis bookkeeping (which waits for Redis to come back), so a test can restart Redis right after a call ended;
and `<dir>/call-<n>-returned` after that bookkeeping, then, if `<dir>/hold` exists, it waits for `<dir>/go-on` before
returning, so a test can take Redis away just before the job stores the call's results.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import time
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path

from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

import prompts
from juiz.engine import CallControl, Completion, Conversation, GenerationRequest, aborted
from juiz.errors import EngineDeadError
from juiz.fake_engine import FakeEngine
from juiz.settings import Settings

GRADED_KEY = "fake-engine:graded"  # hash: item marker → completed gradings
STARTED_KEY = "fake-engine:started"  # counter: engine calls begun
RUNNING_KEY = "fake-engine:running"  # list: the item markers of calls running now (one entry per call)
ABORTED_KEY = "fake-engine:aborted"  # hash: item marker → requests aborted by CallControl
ITEM_MARKER = re.compile(r"\[item-(\d+)\]")


def _check_p_yes() -> dict[str, dict[int, float]]:
    """Per metric graded by a default check prompt, the P(yes) its checks answer for each score under the prompt's
    rule: below the veto and the first cut for 0, midway between cut k and cut k+1 for score k. Derived from the
    prompt files, so refitted cuts don't silently change what the fake grades."""
    out: dict[str, dict[int, float]] = {}
    for metric, version in prompts.DEFAULT_VERSIONS.items():
        rule = prompts.load(metric, version, "en").rule if prompts.kind(metric, version) == "checks" else None
        if rule is None:
            continue
        bounds = [*rule.cuts, 1.0]
        out[metric] = {0: min(rule.cuts[0], rule.veto_below) / 2}
        out[metric].update({k: round((bounds[k - 1] + bounds[k]) / 2, 4) for k in (1, 2, 3)})
    return out


def _veto_floor() -> dict[str, float]:
    """Per metric, the least P(yes) a veto check answers for a score above 0: a veto below the rule's veto_below
    sinks the answer whatever the core checks say, and a cut may sit below it (the score-1 band of checks-4)."""
    return {
        metric: round(rule.veto_below + 0.01, 4)
        for metric, version in prompts.DEFAULT_VERSIONS.items()
        if prompts.kind(metric, version) == "checks" and (rule := prompts.load(metric, version, "en").rule) is not None
    }


CHECK_P_YES = _check_p_yes()
VETO_FLOOR = _veto_floor()


@cache
def _metric_of_check() -> dict[str, tuple[str, str]]:
    """The last line of each default check prompt's questions (any language) → its metric and role: a check
    conversation ends with its question, then the reply instruction."""
    out: dict[str, tuple[str, str]] = {}
    for prompt_id in prompts.available():
        metric, version, lang = prompts.parse_prompt_id(prompt_id)
        template = prompts.load(metric, version, lang or "en")
        if template.kind == "checks" and version == prompts.DEFAULT_VERSIONS[metric]:
            out.update({c.question.strip().splitlines()[-1]: (metric, c.role) for c in template.checks})
    return out


def _asks_yes_no(user: str) -> bool:
    """A check-based prompt's one-token question (the default prompts) rather than a CoT/fast grade."""
    return user.rstrip().endswith(tuple(_final_checks()[1]))


@cache
def _final_checks() -> tuple[frozenset[str], frozenset[str]]:
    """The default check prompts' last once-asked question (the conversation that stands for the metric's grading, as
    the one conversation of a CoT grade does) and every check prompt's reply instruction."""
    questions, replies = set(), set()
    for prompt_id in prompts.available():
        metric, version, lang = prompts.parse_prompt_id(prompt_id)
        template = prompts.load(metric, version, lang or "en")
        if template.kind != "checks":
            continue
        replies.add(template.reply_check.strip())
        if version == prompts.DEFAULT_VERSIONS[metric]:
            questions.add([c for c in template.checks if c.ask == "once"][-1].question)
    return frozenset(questions), frozenset(replies)


def fake_reply(conversation: Conversation) -> str:
    """A well-formed judge reply whose score depends on the question, so results differ between items: a CoT grade,
    or for a check prompt's yes/no question `p=<P(yes)>` (FakeEngine's word probabilities) giving the same score."""
    user = conversation[-1]["content"]
    markers = ITEM_MARKER.findall(user)
    score = int(markers[0]) % 4 if markers else 2
    if _asks_yes_no(user):
        metric, role = next((m for q, m in _metric_of_check().items() if q in user), ("answer_relevance", "core"))
        if role == "scale":  # the answer states every point of the reference: the core checks alone set the score
            return "p=1.0"
        p_yes = CHECK_P_YES[metric][score]
        if role == "veto" and score > 0:
            p_yes = max(p_yes, VETO_FLOOR[metric])
        return f"p={p_yes}"
    return f"Criteria: relevance\nSupporting Evidence: fake evidence\nScore: {score}"


def counts_as_graded(conversation: Conversation) -> bool:
    """Whether generating this conversation completes an item's metric: every CoT/fast one; of a check prompt's
    several, only the default check prompt's last once-asked check (so an item is counted once per metric), never the
    reference a check prompt has the judge write first."""
    user = conversation[-1]["content"].rstrip()
    if user.endswith(_reference_requests()):
        return False
    return not _asks_yes_no(user) or any(question in user for question in _final_checks()[0])


@cache
def _reference_requests() -> tuple[str, ...]:
    """How every check prompt's request for the judge's own reference ends (its `reference` instruction)."""
    return tuple(
        template.reference.strip()
        for prompt_id in prompts.available()
        if (template := prompts.load(*_parts(prompt_id))).kind == "checks" and template.reference
    )


def _parts(prompt_id: str) -> tuple[str, str, str]:
    metric, version, lang = prompts.parse_prompt_id(prompt_id)
    return metric, version, lang or "en"


class CountingFakeEngine:
    """FAKE engine: FakeEngine's replies after a delay; completed gradings counted per `[item-N]` marker in Redis."""

    def __init__(
        self,
        redis: Redis,
        delay_s: float = 0.0,
        model_id: str = "fake-engine",
        *,
        dead: bool = False,
        events: Path | None = None,
    ) -> None:
        self._fake = FakeEngine(fake_reply, model_id=model_id)
        self._redis = redis
        self.delay_s = delay_s
        self.dead = dead
        self.events = events
        self.done = 0

    @property
    def model_id(self) -> str:
        return self._fake.model_id

    @property
    def origin(self) -> Mapping[str, str]:
        return self._fake.origin

    @property
    def calls(self) -> list[int]:
        return self._fake.calls

    def generate(
        self, conversations: Sequence[Conversation], request: GenerationRequest, control: CallControl | None = None
    ) -> list[Completion]:
        self._redis.incr(STARTED_KEY)
        if self.dead:
            raise EngineDeadError("FAKE engine: its process is gone")
        markers = [_marker(c) for c in conversations]
        entry = ",".join(m or "-" for m in markers)
        counted = [counts_as_graded(c) for c in conversations]
        self._redis.rpush(RUNNING_KEY, entry)
        abort = self._wait(len(conversations), control)
        self.done += 1
        if self.events is not None:
            (self.events / f"call-{self.done}-done").touch()
        completions = self._fake.generate(conversations, request)

        def bookkeeping() -> None:
            with self._redis.pipeline() as pipe:
                pipe.lrem(RUNNING_KEY, 1, entry)
                for n, marker in enumerate(markers):
                    if marker is None:
                        continue
                    if n in abort:
                        pipe.hincrby(ABORTED_KEY, marker, 1)
                    elif counted[n]:
                        pipe.hincrby(GRADED_KEY, marker, 1)
                pipe.execute()

        for attempt in Retrying(
            retry=retry_if_exception_type((RedisConnectionError, RedisTimeoutError)),
            wait=wait_fixed(0.1),
            stop=stop_after_delay(120),
            reraise=True,
        ):
            with attempt:
                bookkeeping()
        for n, reason in abort.items():
            completions[n] = aborted(reason)
        if self.events is not None:
            (self.events / f"call-{self.done}-returned").touch()
            if (self.events / "hold").exists():
                _wait_for_file(self.events / "go-on")
        return completions

    def _wait(self, n: int, control: CallControl | None) -> dict[int, str]:
        """Sleep out the delay; returns conversations aborted on the way (cancelled, or past the deadline)."""
        end = time.monotonic() + self.delay_s
        abort: dict[int, str] = {}
        while (now := time.monotonic()) < end:
            if control is not None and control.cancelled is not None:
                abort.update(dict.fromkeys((i for i in control.cancelled() if i not in abort), "cancelled"))
                if len(abort) == n:
                    break
            if control is not None and control.deadline is not None and now >= control.deadline:
                abort.update({i: "timed out" for i in range(n) if i not in abort})
                break
            time.sleep(min(end - now, control.poll_s if control is not None else end - now, 0.05))
        return abort


def _wait_for_file(path: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def _marker(conversation: Conversation) -> str | None:
    found = ITEM_MARKER.findall(conversation[-1]["content"])
    return found[0] if found else None


def main(argv: Sequence[str] | None = None) -> int:
    from workers.worker import ENGINE_DEAD_EXIT, run

    parser = argparse.ArgumentParser(prog="fake-worker")
    parser.add_argument("--burst", action="store_true")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    delay = float(os.environ.get("JUIZ_FAKE_ENGINE_DELAY_S", "0"))
    dead = os.environ.get("JUIZ_FAKE_ENGINE_DEAD") == "1"
    events = Path(os.environ["JUIZ_FAKE_ENGINE_EVENTS"]) if os.environ.get("JUIZ_FAKE_ENGINE_EVENTS") else None
    engine = CountingFakeEngine(
        Redis.from_url(settings.redis_url), delay_s=delay, model_id=settings.model, dead=dead, events=events
    )
    try:
        run(settings, engine, burst=args.burst)
    except EngineDeadError:
        return ENGINE_DEAD_EXIT
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
