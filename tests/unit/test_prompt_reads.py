"""How the vLLM engine tells a call's prompt tokens: from its steps as they compute them, then from each request's
output, never the same tokens twice (juiz.engines.vllm_engine.PromptReads, StepTokens)."""

from __future__ import annotations

from types import SimpleNamespace

from juiz.engines.vllm_engine import PromptReads, StepTokens


def stats(context_tokens: int, dummy: bool = False) -> SimpleNamespace:
    return SimpleNamespace(iteration_details=SimpleNamespace(num_ctx_tokens=context_tokens, is_dummy=dummy))


def test_the_steps_prompt_tokens_are_taken_once_each() -> None:
    steps = StepTokens()
    steps.record(stats(1024), None)
    steps.record(stats(300), None)
    steps.record(stats(999, dummy=True), None)  # a data-parallel filler step computes nothing of ours
    steps.record(SimpleNamespace(iteration_details=None), None)  # stats without the details: nothing known
    steps.log()
    assert steps.take() == 1324
    assert steps.take() == 0


def out(request_id: str) -> SimpleNamespace:
    return SimpleNamespace(request_id=request_id)


def test_a_prefill_is_told_step_by_step_and_its_output_adds_only_the_rest() -> None:
    reads = PromptReads(["a", "b"])
    running = {"a": 0, "b": 1}
    assert reads.step(1024, [], running) == ("a", 1024)  # a's prompt, before a has any output
    assert reads.step(1024, [], running) == ("a", 1024)
    # a's prefill ends in a step that also starts b's: left to the outputs, which count each request exactly.
    assert reads.step(700, [out("a")], running) is None
    assert reads.said("a", 2500) == 452
    assert reads.step(1024, [], running) == ("b", 1024)
    assert reads.said("b", 1300) == 276


def test_steps_tell_nothing_without_prompt_tokens_or_a_request_of_this_call_waiting() -> None:
    reads = PromptReads(["a"])
    assert reads.step(0, [], {"a": 0}) is None
    assert reads.step(512, [], {}) is None  # a is no longer running (cancelled)
    assert reads.said("a", 700) == 700
    assert reads.step(512, [out("x")], {"a": 0}) is None  # decode of another's reply: a has answered already
    assert reads.said("a", 0) == 0
