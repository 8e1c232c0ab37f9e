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


def same_reply(a: Completion, b: Completion) -> bool:
    """llama.cpp's: the same text, tokens, finish reason and prompt; log-probabilities within float noise. (Its slots
    serve a prompt from whichever cache they hold, so the cached part, and with it the last digits, may differ.)"""
    if (a.text, a.tokens, a.finish_reason, a.prompt_tokens, a.error) != (
        b.text,
        b.tokens,
        b.finish_reason,
        b.prompt_tokens,
        b.error,
    ):
        return False
    return all(
        x.keys() == y.keys() and all(math.isclose(x[k], y[k], abs_tol=1e-3) for k in x)
        for x, y in zip(a.top_logprobs, b.top_logprobs, strict=True)
    )


def test_a_long_reply_heard_token_by_token_is_the_reply_the_unstreamed_request_gives(each_engine: JudgeEngine) -> None:
    """Unstreamed, streamed (someone listens for tokens), unstreamed again: the last two find the prompts cached alike.
    vLLM's completions are equal field by field (text, tokens, log-probabilities, finish reason, prompt tokens, cached
    prompt tokens); llama.cpp's (one conversation: one slot) as `same_reply` says."""
    exact = isinstance(each_engine, VLLMEngine)
    n = 3 if exact else 1
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
    if exact:
        assert streamed == unstreamed
    else:
        assert all(same_reply(a, b) for a, b in zip(streamed, unstreamed, strict=True)), (streamed, unstreamed)
    for index, completion in enumerate(streamed):
        assert completion.error is None and len(completion.tokens) > 2
        assert written[index] == len(completion.tokens)
        assert read[index] == completion.prompt_tokens - completion.cached_prompt_tokens
        # Heard as it was written: several reports, all before its end.
        assert events[index][-1] == "finished" and events[index].count("tokens") >= 2
