"""Tokens reported while a long reply is written, on both in-process engines (SmolLM2-135M): vLLM's CUMULATIVE
outputs and llama.cpp's streamed replies give the completion the unstreamed request gives, and every token is heard
before its conversation is finished."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest

from juiz.engines.base import CallControl, Completion, Conversation, GenerationRequest, JudgeEngine
from juiz.engines.vllm_engine import VLLMEngine

pytestmark = pytest.mark.engine

LONG = GenerationRequest(max_tokens=24, logprobs=5)  # plain text, several tokens, log-probabilities on each


@pytest.fixture(params=["vllm", "llamacpp"])
def each_engine(request: pytest.FixtureRequest) -> JudgeEngine:
    name = "tiny_engine" if request.param == "vllm" else "tiny_llamacpp_engine"
    engine: JudgeEngine = request.getfixturevalue(name)
    return engine


def conversations(n: int) -> list[Conversation]:
    return [[{"role": "user", "content": f"Tokens {i}: describe a river in two sentences."}] for i in range(n)]


# Two top candidates closer than this are a tie that float noise may break either way.
NEAR_TIE = 0.25


def margin(top: dict[str, float]) -> float:
    """How far the chosen token's log-probability stands above the runner-up's."""
    best = sorted(top.values(), reverse=True)
    return best[0] - best[1] if len(best) > 1 else math.inf


def same_reply(a: Completion, b: Completion) -> bool:
    """The same prompt, and the same reply token by token up to the first near-tie (the two best candidates within
    NEAR_TIE), with log-probabilities within float noise until then. Neither engine is batch-invariant: vLLM batches a
    streamed call's requests differently, and a llama.cpp slot may serve the prompt from a cache computed beside
    another slot's work, so the last digits differ and a greedy choice between two near-equal tokens may flip; a reply
    that differs where the choice was clear is a real difference."""
    if (a.prompt_tokens, a.error, b.error) != (b.prompt_tokens, None, None):
        return False
    for token_a, token_b, top_a, top_b in zip(a.tokens, b.tokens, a.top_logprobs, b.top_logprobs, strict=False):
        if min(margin(top_a), margin(top_b)) < NEAR_TIE:
            return True
        shared = top_a.keys() & top_b.keys()
        if token_a != token_b or not all(math.isclose(top_a[k], top_b[k], abs_tol=NEAR_TIE / 2) for k in shared):
            return False
    return a.tokens == b.tokens and a.finish_reason == b.finish_reason


def test_a_long_reply_heard_token_by_token_is_the_reply_the_unstreamed_request_gives(each_engine: JudgeEngine) -> None:
    """Unstreamed, streamed (someone listens for tokens), unstreamed again: the last two find the prompts cached alike.
    Both replies are the same as `same_reply` says; vLLM's also find the same prompt tokens cached."""
    vllm = isinstance(each_engine, VLLMEngine)
    n = 3 if vllm else 1
    each_engine.generate(conversations(n), LONG)  # the prompts cached for both runs compared
    events: dict[int, list[str]] = defaultdict(list)
    written: dict[int, int] = defaultdict(int)
    read: dict[int, int] = defaultdict(int)

    def on_tokens(index: int, new_written: int, new_read: int) -> None:
        events[index].append("tokens")
        written[index] += new_written
        read[index] += new_read

    control = CallControl(on_tokens=on_tokens, on_finished=lambda index: events[index].append("finished"))
    streamed = each_engine.generate(conversations(n), LONG, control)
    unstreamed = each_engine.generate(conversations(n), LONG)
    assert all(same_reply(a, b) for a, b in zip(streamed, unstreamed, strict=True)), (streamed, unstreamed)
    if vllm:
        assert [c.cached_prompt_tokens for c in streamed] == [c.cached_prompt_tokens for c in unstreamed]
    for index, completion in enumerate(streamed):
        assert completion.error is None and len(completion.tokens) > 2
        # llama.cpp's usage counts the end-of-turn token it wrote on a reply that stopped, which the reply doesn't show.
        stop_token = 1 if not vllm and completion.finish_reason == "stop" else 0
        assert written[index] == len(completion.tokens) + stop_token
        assert completion.reply_tokens == written[index]  # the engine's own count of the reply
        assert read[index] == completion.prompt_tokens - completion.cached_prompt_tokens
        # Heard as it was written: several reports, all before its end.
        assert events[index][-1] == "finished" and events[index].count("tokens") >= 2
