"""CallControl on the FAKE engine (which the workers' fault tests use): deadline and cancel, as the real one does."""

from __future__ import annotations

import time
from collections.abc import Collection

from juiz.engines.base import CallControl, Conversation, GenerationRequest
from juiz.engines.fake import FakeEngine

REQUEST = GenerationRequest(max_tokens=8)


def conversations(n: int) -> list[Conversation]:
    return [[{"role": "user", "content": f"item {i}"}] for i in range(n)]


def test_without_control_everything_completes() -> None:
    results = FakeEngine(lambda c: "Score: 3").generate(conversations(3), REQUEST)
    assert [r.error for r in results] == [None, None, None]


def test_a_cancelled_subset_is_aborted_and_the_rest_completes() -> None:
    results = FakeEngine(lambda c: "Score: 3").generate(
        conversations(4), REQUEST, CallControl(cancelled=lambda: {1, 3})
    )
    assert [r.error for r in results] == [None, "cancelled", None, "cancelled"]
    assert [r.finish_reason for r in results] == ["stop", "abort", "stop", "abort"]
    assert results[1].text == ""


def test_a_deadline_reached_mid_call_times_out_the_rest() -> None:
    control = CallControl()
    served: list[str] = []

    def reply(conversation: Conversation) -> str:
        served.append(conversation[-1]["content"])
        if len(served) == 2:
            control.deadline = time.monotonic()  # the deadline passes while the second item is generated
        return "Score: 3"

    results = FakeEngine(reply).generate(conversations(4), REQUEST, control)
    assert [r.error is None for r in results] == [True, True, False, False]
    assert results[2].error is not None and results[2].error.startswith("timed out after")
    assert results[3].finish_reason == "abort"


def test_cancel_is_polled_at_most_every_poll_s() -> None:
    polls: list[float] = []

    def cancelled() -> Collection[int]:
        polls.append(time.monotonic())
        return ()

    FakeEngine(lambda c: "Score: 3").generate(conversations(50), REQUEST, CallControl(cancelled=cancelled, poll_s=3600))
    assert len(polls) == 1


def test_a_subset_of_a_control_names_its_own_items() -> None:
    """A worker builds one control for every item of its chunks and grades only the cache's misses: the call over
    items 4, 1 and 2 of the chunk sees item 1 cancelled as its own item 1 and item 4 as its own item 0."""
    deadline = time.monotonic() + 60
    whole = CallControl(deadline=deadline, cancelled=lambda: [0, 1, 4])
    part = whole.subset([4, 1, 2])
    assert part.deadline == deadline
    assert part.cancelled is not None and sorted(part.cancelled()) == [0, 1]
    results = FakeEngine(lambda c: "Score: 3").generate(conversations(3), REQUEST, part)
    assert [r.error for r in results] == ["cancelled", "cancelled", None]


def test_each_conversation_is_reported_finished_once_whatever_its_outcome() -> None:
    """on_finished hears every index once, as it is done: replies, cancelled ones and those past the deadline."""
    control = CallControl(cancelled=lambda: {1}, poll_s=0)
    heard: list[int] = []

    def reply(conversation: Conversation) -> str:
        # When conversation 2 is generated, 0 and 1 (cancelled) were reported already: progress moves within the call.
        if conversation[-1]["content"] == "item 2":
            assert heard == [0, 1]
            control.deadline = time.monotonic()
        return "Score: 3"

    control.on_finished = heard.append
    results = FakeEngine(reply).generate(conversations(4), REQUEST, control)
    assert heard == [0, 1, 2, 3]
    assert [r.error is None for r in results] == [True, False, True, False]


def test_a_subset_reports_finished_conversations_by_the_whole_calls_index() -> None:
    heard: list[int] = []
    part = CallControl(on_finished=heard.append).subset([4, 1, 2])
    FakeEngine(lambda c: "Score: 3").generate(conversations(3), REQUEST, part)
    assert heard == [4, 1, 2]


def test_a_subset_reports_tokens_by_the_whole_calls_index_before_each_conversation_is_finished() -> None:
    """on_tokens hears a conversation's prompt read and its reply tokens one by one, all before its on_finished."""
    heard: list[tuple[str, int, int, int]] = []
    part = CallControl(
        on_finished=lambda i: heard.append(("finished", i, 0, 0)),
        on_tokens=lambda i, written, read: heard.append(("tokens", i, written, read)),
    ).subset([4, 1])
    results = FakeEngine(lambda c: "Score: 3").generate(conversations(2), REQUEST, part)
    per_reply = [len(r.tokens) for r in results]
    assert per_reply == [2, 2]  # "Score: " and "3"
    read = 2  # the FAKE engine's stand-in for prompt tokens: the words of "item 0"
    assert heard == [
        ("tokens", 4, 0, read),
        ("tokens", 4, 1, 0),
        ("tokens", 4, 1, 0),
        ("finished", 4, 0, 0),
        ("tokens", 1, 0, read),
        ("tokens", 1, 1, 0),
        ("tokens", 1, 1, 0),
        ("finished", 1, 0, 0),
    ]


def test_vllm_streams_only_a_listened_to_long_single_reply_and_counts_its_tokens_so_far() -> None:
    """CUMULATIVE outputs (each the reply so far) only where they tell something: a reply longer than one token, one
    reply per request, someone listening; the tokens of an output are its replies' and its prompt less the cache's."""
    from types import SimpleNamespace

    from juiz.engines.vllm_engine import streams, tokens_so_far

    listening = CallControl(on_tokens=lambda i, written, read: None)
    assert streams(GenerationRequest(max_tokens=160, logprobs=0), listening)
    assert not streams(GenerationRequest(max_tokens=1, logprobs=0), listening)  # a check: FINAL_ONLY
    assert not streams(GenerationRequest(max_tokens=160, n=3), listening)  # vLLM streams n replies apart
    assert not streams(GenerationRequest(max_tokens=160), CallControl())  # nobody listens
    output = SimpleNamespace(
        outputs=[SimpleNamespace(token_ids=[1, 2, 3]), SimpleNamespace(token_ids=[4])],
        prompt_token_ids=list(range(100)),
        num_cached_tokens=64,
    )
    assert tokens_so_far(output) == (4, 36)
