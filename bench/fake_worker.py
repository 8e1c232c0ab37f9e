"""The FAKE-engine worker of the tests and the benchmarks: `python -m bench.fake_worker [--burst]`.

The same worker code as `juiz worker` (`workers.worker.run`: RQ, chunk claims, coalescing, result cache, storage) with
`FakeWorkerEngine` in place of vLLM, so the API and the queue are exercised and measured without a model. Its model id
says FAKE (JUIZ_MODEL if that says fake, else FAKE_MODEL_ID), and so does every result it stores. `juiz worker` itself
never uses a fake. Here rather than under tests/: the benchmarks run it, and tests may import bench, never the reverse.

Replies: a well-formed judge reply whose score is the item's tag number mod 4 (`[item-7]`, or bench.common's
`[<tag>-7]`; 2 without a tag), so results differ between items; a check prompt's yes/no question gets the P(yes)
that gives the same score under the default check prompt's rule (derived from the prompt files).

What a call may do, from the environment (every one off by default):

    JUIZ_FAKE_CALL_S, JUIZ_FAKE_ITEM_S  a call's cost, slept: seconds per call plus seconds per item (a GPU's fixed and
                                        per-item costs); cancelled items are aborted at once, a deadline aborts the rest
    JUIZ_FAKE_CONVERSATION_S            seconds per conversation, slept one after another after the call's cost, each
                                        conversation reported finished as it is done (progress within a call)
    JUIZ_FAKE_DEAD=1                    every call raises EngineDeadError (an engine whose process died): exit code 3
    JUIZ_FAKE_COUNT=1                   per `[item-N]`, completed gradings (`fake-engine:graded`) and aborted requests
                                        (`fake-engine:aborted`) in Redis, calls begun (`fake-engine:started`) and the
                                        items of the calls running now (`fake-engine:running`): a test SIGKILLs a
                                        worker mid-call and checks every item was graded once, or acts mid-call on an
                                        event instead of after a sleep
    JUIZ_FAKE_EVENTS=1                  every call's start and end in Redis (`bench:calls`: JSON with the worker's pid,
                                        the item count and wall-clock times), so a benchmark sees calls without polling
                                        the workers; a call holding an item marked `[bench-hold]` waits, at no cost,
                                        until `bench:release` exists
    JUIZ_FAKE_CALLS_FILE=<path>         each finished call appended as a JSON line with its items' tags: a record that
                                        needs no Redis, for a benchmark that stops Redis under the workers
    JUIZ_FAKE_EVENTS_DIR=<dir>          `<dir>/call-<n>-done` once a call's cost is slept, before its Redis bookkeeping
                                        (which waits for Redis to come back), `<dir>/call-<n>-returned` after it; then,
                                        while `<dir>/hold` exists, it waits for `<dir>/go-on` before returning (a test
                                        takes Redis away just before the job stores the call's results)
"""

from __future__ import annotations

import argparse
import json
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
from juiz.engines.base import CallControl, Completion, Conversation, GenerationRequest, aborted
from juiz.engines.fake import FakeEngine
from juiz.runtime.errors import EngineDeadError
from juiz.runtime.settings import Settings

FAKE_MODEL_ID = "FAKE-engine (no model; benchmark of the API only)"
# JUIZ_FAKE_COUNT
GRADED_KEY = "fake-engine:graded"  # hash: item marker → completed gradings
STARTED_KEY = "fake-engine:started"  # counter: engine calls begun
RUNNING_KEY = "fake-engine:running"  # list: the item markers of calls running now (one entry per call)
ABORTED_KEY = "fake-engine:aborted"  # hash: item marker → requests aborted by CallControl
# JUIZ_FAKE_EVENTS
CALLS_KEY = "bench:calls"
HOLD_MARKER = "[bench-hold]"  # a call with such an item waits until RELEASE_KEY exists, at no cost
RELEASE_KEY = "bench:release"

ITEM_MARKER = re.compile(r"\[item-(\d+)\]")  # the tests' triples
TAG = re.compile(r"\[([\w.-]+-(\d+))\]")  # bench.common.build_triples's question tag (`[item-N]` is one too)


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


def _parts(prompt_id: str) -> tuple[str, str, str]:
    metric, version, lang = prompts.parse_prompt_id(prompt_id)
    return metric, version, lang or "en"


@cache
def _metric_of_check() -> dict[str, tuple[str, str, str]]:
    """The last line of each default check prompt's questions (any language) → its metric, role and what a yes means:
    a check conversation holds its question, then the reply instruction. Completeness asks answer relevance's
    key-point conversations word for word, so a question both ask reads as answer relevance's."""
    out: dict[str, tuple[str, str, str]] = {}
    for prompt_id in prompts.available():
        metric, version, lang = _parts(prompt_id)
        template = prompts.load(metric, version, lang)
        if template.kind == "checks" and version == prompts.DEFAULT_VERSIONS[metric]:
            for c in template.checks:
                key = c.question.strip().splitlines()[-1]
                if out.get(key, ("",))[0] != "answer_relevance":
                    out[key] = (metric, c.role, c.yes_means)
    return out


@cache
def _final_checks() -> frozenset[str]:
    """The default check prompts' last once-asked question: the conversation that stands for the metric's grading, as
    the one conversation of a CoT grade does."""
    questions = set()
    for prompt_id in prompts.available():
        metric, version, lang = _parts(prompt_id)
        template = prompts.load(metric, version, lang)
        if template.kind != "checks":
            continue
        once = [c for c in template.checks if c.ask == "once"]
        if version == prompts.DEFAULT_VERSIONS[metric] and once:  # completeness asks only of the reference's points
            questions.add(once[-1].question)
    return frozenset(questions)


@cache
def _reference_requests() -> tuple[str, ...]:
    """How every check prompt's request for the judge's own reference ends (its `reference` instruction)."""
    return tuple(
        template.reference.strip()
        for prompt_id in prompts.available()
        if (template := prompts.load(*_parts(prompt_id))).kind == "checks" and template.reference
    )


def _score(user: str) -> int:
    marker = ITEM_MARKER.search(user) or TAG.search(user)
    return int(marker.groups()[-1]) % 4 if marker else 2  # the tag's number: its last group, in either pattern


# The judge's own reference, as the FAKE writes it: points of short words only, so no share of their words is counted
# (juiz.judging.word_overlap) and the scale checks' P(yes) alone reads them, as `fake_reply` assumes.
FAKE_REFERENCE = "- it is so\n- so it is\n- as it was"


def fake_reply(conversation: Conversation) -> str:
    """A well-formed judge reply whose score depends on the item's tag, so results differ between items: a CoT grade,
    or for a check prompt's yes/no question `p=<P(yes)>` (FakeEngine's word probabilities) giving the same score; for
    a check prompt's reference, FAKE_REFERENCE."""
    user = conversation[-1]["content"]
    if user.rstrip().endswith(_reference_requests()):
        return FAKE_REFERENCE
    score = _score(user)
    if prompts.asks_yes_no(user):
        metric, role, yes_means = next(
            (m for q, m in _metric_of_check().items() if q in user), ("answer_relevance", "core", "good")
        )
        if role == "scale":  # the answer states every point of the reference: the core checks alone set the score
            return "p=1.0"
        value = CHECK_P_YES[metric][score]
        if role == "veto" and score > 0:
            value = max(value, VETO_FLOOR[metric])
        return f"p={value if yes_means == 'good' else round(1.0 - value, 4)}"
    return f"Criteria: relevance\nSupporting Evidence: fake evidence, no model ran\nScore: {score}"


def counts_as_graded(conversation: Conversation) -> bool:
    """Whether generating this conversation completes an item's metric: every CoT/fast one; of a check prompt's
    several, only the default check prompt's last once-asked check (so an item is counted once per metric), never the
    reference a check prompt has the judge write first."""
    user = conversation[-1]["content"].rstrip()
    if user.endswith(_reference_requests()):
        return False
    return not prompts.asks_yes_no(user) or any(question in user for question in _final_checks())


def _marker(conversation: Conversation) -> str | None:
    found = ITEM_MARKER.search(conversation[-1]["content"])
    return found.group(1) if found else None


class FakeWorkerEngine(FakeEngine):
    """FAKE engine for a worker: `fake_reply`'s replies, after the call's cost; what it records is the module
    docstring's (`counts`: JUIZ_FAKE_COUNT, `events`: JUIZ_FAKE_EVENTS, `calls_file`, `events_dir`)."""

    def __init__(
        self,
        counts: Redis | None = None,
        *,
        call_s: float = 0.0,
        item_s: float = 0.0,
        model_id: str = "fake-engine",
        dead: bool = False,
        events: Redis | None = None,
        calls_file: str | None = None,
        events_dir: Path | None = None,
        conversation_s: float = 0.0,
    ) -> None:
        super().__init__(fake_reply, model_id=model_id, conversation_s=conversation_s)
        self.counts, self.events, self.calls_file, self.events_dir = counts, events, calls_file, events_dir
        self.call_s, self.item_s, self.dead = call_s, item_s, dead
        self.done = 0

    def generate(
        self, conversations: Sequence[Conversation], request: GenerationRequest, control: CallControl | None = None
    ) -> list[Completion]:
        started = time.time()
        record = {"pid": os.getpid(), "n": len(conversations)}
        if self.counts is not None:
            self.counts.incr(STARTED_KEY)
        if self.dead:
            raise EngineDeadError("FAKE engine: its process is gone")
        if self.events is not None and any(HOLD_MARKER in c[-1]["content"] for c in conversations):
            self.events.rpush(CALLS_KEY, json.dumps({**record, "hold": started}))
            while not self.events.exists(RELEASE_KEY):
                time.sleep(0.005)
            return super().generate(conversations, request)
        if self.events is not None:
            self.events.rpush(CALLS_KEY, json.dumps({**record, "start": started}))
        markers = [_marker(c) for c in conversations]
        entry = ",".join(m or "-" for m in markers)
        if self.counts is not None:
            self.counts.rpush(RUNNING_KEY, entry)
        abort = self._wait(len(conversations), control)
        self.done += 1
        if self.events_dir is not None:
            (self.events_dir / f"call-{self.done}-done").touch()
        # Progress, and cancels between conversations (each conversation_s long) as a real engine aborts requests
        # mid-call; the deadline was honoured above, while the call's cost was slept.
        reporting = (
            None
            if control is None
            else CallControl(
                on_finished=control.on_finished,
                on_tokens=control.on_tokens,
                cancelled=control.cancelled,
                poll_s=control.poll_s,
            )
        )
        completions = super().generate(conversations, request, reporting)
        if self.counts is not None:
            self._count(entry, markers, [counts_as_graded(c) for c in conversations], abort)
        for n, reason in abort.items():
            completions[n] = aborted(reason)
        finished = {**record, "start": started, "end": time.time()}
        # Aborted while its cost was slept or between conversations (cancelled, or cut for other work): not generated.
        cut = sum(1 for c in completions if c.finish_reason == "abort")
        if self.events is not None:
            self.events.rpush(CALLS_KEY, json.dumps(finished))
        if self.calls_file is not None:
            tags = [m.group(1) for c in conversations if (m := TAG.search(c[-1]["content"]))]
            with open(self.calls_file, "a", encoding="utf-8") as f:
                f.write(json.dumps({**finished, "aborted": cut, "tags": tags}) + "\n")
        if self.events_dir is not None:
            (self.events_dir / f"call-{self.done}-returned").touch()
            if (self.events_dir / "hold").exists():
                _wait_for_file(self.events_dir / "go-on")
        return completions

    def _wait(self, n: int, control: CallControl | None) -> dict[int, str]:
        """Sleep out the call's cost; returns conversations aborted on the way (cancelled, or past the deadline)."""
        end = time.monotonic() + self.call_s + self.item_s * n
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

    def _count(self, entry: str, markers: list[str | None], counted: list[bool], abort: dict[int, str]) -> None:
        """The call's gradings and aborts, its entry off the running list; retried while Redis is away."""
        assert self.counts is not None
        redis = self.counts

        def bookkeeping() -> None:
            with redis.pipeline() as pipe:
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


def _wait_for_file(path: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def engine_from_env(settings: Settings, env: Mapping[str, str] = os.environ) -> FakeWorkerEngine:
    """The engine the module docstring's variables describe."""
    redis = Redis.from_url(settings.redis_url)
    model_id = settings.model if "fake" in settings.model.lower() else FAKE_MODEL_ID
    return FakeWorkerEngine(
        redis if env.get("JUIZ_FAKE_COUNT") == "1" else None,
        call_s=float(env.get("JUIZ_FAKE_CALL_S") or 0),
        item_s=float(env.get("JUIZ_FAKE_ITEM_S") or 0),
        conversation_s=float(env.get("JUIZ_FAKE_CONVERSATION_S") or 0),
        model_id=model_id,
        dead=env.get("JUIZ_FAKE_DEAD") == "1",
        events=redis if env.get("JUIZ_FAKE_EVENTS") == "1" else None,
        calls_file=env.get("JUIZ_FAKE_CALLS_FILE") or None,
        events_dir=Path(env["JUIZ_FAKE_EVENTS_DIR"]) if env.get("JUIZ_FAKE_EVENTS_DIR") else None,
    )


def main(argv: Sequence[str] | None = None) -> int:
    from workers.worker import ENGINE_DEAD_EXIT, load_prompts, run

    parser = argparse.ArgumentParser(prog="python -m bench.fake_worker", description=__doc__.split("\n\n")[0])
    parser.add_argument("--burst", action="store_true", help="grade what is queued, then exit")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    load_prompts()
    try:
        run(settings, engine_from_env(settings), burst=args.burst)
    except EngineDeadError:
        return ENGINE_DEAD_EXIT
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
