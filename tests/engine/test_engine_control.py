"""Per-request generation on the real engine (SmolLM2-135M): deadlines, cancel and interruptions abort exactly this
call's requests, nothing is left in the engine, and the next call's results are all its own.

Mid-call moments are reached by events, not timers: `cancelled()` is polled between engine steps (poll_s=0), so its
third poll comes after the engine has stepped at least twice; the test acts from there.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Collection
from pathlib import Path

import pytest
from rq.timeouts import JobTimeoutException

from juiz.engines.base import IN_PROCESS, CallControl, Conversation, GenerationRequest
from juiz.engines.vllm_engine import VLLMEngine
from juiz.judging.judge import Judge
from juiz.runtime.errors import EngineDeadError
from schemas import BatchOptions, JudgementStatus, Triple

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.engine

REQUEST = GenerationRequest(max_tokens=24, logprobs=0)  # plain text: several steps per call, no grammar to compile
# Replies that can only come from an interrupted or foreign request: structured outputs force the marker, many steps
# long. Exact replies can't tell: on some CPUs (bf16 AMX kernels) greedy text changes with the batch a reused
# prefix block was computed in, so "the same text as before" is not a property of a clean engine.
MARKER = "DOOMED"
MARKED = GenerationRequest(max_tokens=80, regex=f"({MARKER} ){{20}}", logprobs=0)


def conversations(tag: str, n: int) -> list[Conversation]:
    return [[{"role": "user", "content": f"{tag} {i}: name a colour and a number."}] for i in range(n)]


def on_poll(n: int, action: Callable[[], None]) -> Callable[[], Collection[int]]:
    """A `cancelled` callback that runs `action` at its n-th poll (after the engine has stepped n-1 times)."""
    polls = 0

    def cancelled() -> Collection[int]:
        nonlocal polls
        polls += 1
        if polls == n:
            action()
        return ()

    return cancelled


def assert_clean_next_call(engine: VLLMEngine) -> None:
    assert engine.in_flight == 0  # nothing of the interrupted call left in the engine
    after = engine.generate(conversations("probe", 4), REQUEST)
    assert [r.error for r in after] == [None] * 4
    assert all(r.text and MARKER not in r.text for r in after)  # its own replies, none of the interrupted call's


def test_a_deadline_mid_call_aborts_the_rest_and_the_next_call_is_clean(tiny_engine: VLLMEngine) -> None:
    control = CallControl(poll_s=0)

    def expire() -> None:
        control.deadline = time.monotonic()

    control.cancelled = on_poll(3, expire)
    results = tiny_engine.generate(conversations("slow", 8), MARKED, control)
    timed_out = [r for r in results if r.error is not None]
    assert timed_out, "the deadline passed after two steps of 24-token replies: something must still run"
    assert all(r.error.startswith("timed out after") and r.finish_reason == "abort" for r in timed_out)  # type: ignore[union-attr]
    assert_clean_next_call(tiny_engine)


@pytest.mark.parametrize(
    "interruption",
    [RuntimeError("a bug in the caller's callback"), JobTimeoutException("RQ's SIGALRM"), KeyboardInterrupt()],
    ids=["exception", "rq-job-timeout", "ctrl-c"],
)
def test_an_interruption_mid_call_leaves_nothing_in_the_engine(
    tiny_engine: VLLMEngine, interruption: BaseException
) -> None:
    def interrupt() -> None:
        raise interruption

    control = CallControl(poll_s=0, cancelled=on_poll(3, interrupt))
    with pytest.raises(type(interruption)):
        tiny_engine.generate(conversations("doomed", 8), MARKED, control)
    assert_clean_next_call(tiny_engine)


def test_a_cancelled_subset_is_aborted_and_the_rest_completes(tiny_engine: VLLMEngine) -> None:
    control = CallControl(poll_s=0, cancelled=lambda: {1, 3})
    results = tiny_engine.generate(conversations("mixed", 5), REQUEST, control)
    assert [r.error for r in results] == [None, "cancelled", None, "cancelled", None]
    assert results[1].finish_reason == results[3].finish_reason == "abort"
    assert all(results[i].text for i in (0, 2, 4))
    assert tiny_engine.in_flight == 0


def test_outputs_of_requests_that_are_not_this_calls_are_ignored(tiny_engine: VLLMEngine) -> None:
    """A request someone else left in the engine (what used to poison the next `llm.chat`) is never returned."""
    llm = tiny_engine._llm
    stranger = llm._preprocess_chat_one(conversations("stranger", 1)[0])  # type: ignore[arg-type]
    llm.llm_engine.add_request("stranger-0", stranger, tiny_engine._sampling(MARKED))
    try:
        results = tiny_engine.generate(conversations("probe", 4), REQUEST)
        assert [r.error for r in results] == [None] * 4
        assert all(r.text and MARKER not in r.text for r in results)
    finally:
        llm.llm_engine.abort_request(["stranger-0"])
    assert tiny_engine.in_flight == 0


def test_a_prompt_too_long_for_the_context_fails_alone(tiny_engine: VLLMEngine) -> None:
    assert tiny_engine.max_model_len == 4096  # the session engine's context (tests/conftest.py)
    fits = conversations("short", 2)
    crowded = [{"role": "user", "content": "hello " * 2500}]  # fits alone, not with 2,000 reply tokens
    huge = [{"role": "user", "content": "hello " * 50_000}]  # over the context on its own
    results = tiny_engine.generate([fits[0], crowded, huge, fits[1]], GenerationRequest(max_tokens=2000, logprobs=0))
    assert results[1].error is not None and results[1].error.startswith("prompt is ")
    assert "the model's context is 4096 tokens (2000 of them kept for the reply)" in results[1].error
    assert results[2].error is not None and "the model's context is 4096 tokens" in results[2].error
    assert results[0].error is None and results[3].error is None and results[0].text and results[3].text


def test_an_over_long_item_of_one_tenant_fails_alone_in_a_shared_call(tiny_engine: VLLMEngine) -> None:
    tenant_a = [Triple(id="a-long", question="Is this relevant?", answer="blah " * 40_000)]
    tenant_b = [Triple(id=f"b-{i}", question="What is the capital of Peru?", answer="Lima.") for i in range(3)]
    # fast mode applies to CoT prompts only (the default check prompts, asks one token per check in any mode)
    items = [(t, BatchOptions(prompt="answer_relevance@juiz-1", mode="fast")) for t in tenant_a + tenant_b]
    results = Judge(tiny_engine).grade_many(items)
    assert results[0].status == JudgementStatus.FAILED and "context" in (results[0].error or "")
    for result in results[1:]:
        assert result.status == JudgementStatus.OK and result.error is None
        assert "a-long" not in result.model_dump_json() and "context is" not in result.model_dump_json()


def test_vllms_engine_dead_error_becomes_juizs() -> None:
    from vllm.v1.engine.exceptions import EngineDeadError as VLLMEngineDeadError

    class Dead:
        model_id = "fake-dead"
        origin = IN_PROCESS

        def generate(self, conversations, request, control=None):  # type: ignore[no-untyped-def]
            raise VLLMEngineDeadError()

    with pytest.raises(EngineDeadError) as raised:
        Judge(Dead()).grade([Triple(id="x", question="Q?", answer="A.")])
    assert isinstance(raised.value.__cause__, VLLMEngineDeadError)


def test_each_request_is_reported_finished_once_as_it_finishes(tiny_engine: VLLMEngine) -> None:
    """Every index is reported once, when it is over: the one cancelled at the first poll at once, while the other
    two (80 forced tokens) are still in the engine; those two as the steps that finish them return."""
    heard: list[tuple[int, int]] = []  # (index, requests of the call still in the engine then)
    control = CallControl(poll_s=0, cancelled=lambda: {2})
    control.on_finished = lambda index: heard.append((index, tiny_engine.in_flight))
    results = tiny_engine.generate(conversations("finish", 3), MARKED, control)
    assert sorted(index for index, _ in heard) == [0, 1, 2]
    assert heard[0][0] == 2 and heard[0][1] > 0  # the cancelled one first, the other two still running
    assert [r.error for r in results] == [None, None, "cancelled"]
    assert tiny_engine.in_flight == 0


def test_a_prefill_longer_than_a_step_is_heard_step_by_step_and_counted_once() -> None:
    """Three one-token replies to ~600-token prompts, 128 prompt tokens a step (tests.engine.step_reads): each prompt
    is heard step by step before its request has an output, and each request's prompt tokens are counted once: what
    it computed (its prompt less what its cache served), no more, in its own name."""
    run = subprocess.run(
        [sys.executable, "-m", "tests.engine.step_reads"], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-2000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    for index, reply in enumerate(seen["replies"]):
        heard = seen["heard"][str(index)]
        assert reply["error"] is None and reply["prompt"] > 512
        assert sum(read for _, read in heard) == reply["prompt"] - reply["cached"]
        assert sum(written for written, _ in heard) == 1
        steps = [read for written, read in heard if written == 0]
        assert len(steps) >= 3 and set(steps) == {128}  # heard a step at a time, before its output
