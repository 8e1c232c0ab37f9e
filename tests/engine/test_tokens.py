"""Tokens reported while a long reply is written, on both in-process engines (SmolLM2-135M): vLLM's CUMULATIVE
outputs and llama.cpp's streamed replies give the completion the unstreamed request gives, and every token is heard
before its conversation is finished."""

from __future__ import annotations

from collections import defaultdict

import pytest

from juiz.engines.base import CallControl, Conversation, GenerationRequest, JudgeEngine

pytestmark = pytest.mark.engine

LONG = GenerationRequest(max_tokens=24, logprobs=5)  # plain text, several tokens, log-probabilities on each


@pytest.fixture(params=["vllm", "llamacpp"])
def each_engine(request: pytest.FixtureRequest) -> JudgeEngine:
    name = "tiny_engine" if request.param == "vllm" else "tiny_llamacpp_engine"
    engine: JudgeEngine = request.getfixturevalue(name)
    return engine


def conversations() -> list[Conversation]:
    return [[{"role": "user", "content": f"Tokens {i}: describe a river in two sentences."}] for i in range(3)]


def test_a_long_reply_heard_token_by_token_is_the_reply_the_unstreamed_request_gives(each_engine: JudgeEngine) -> None:
    """Unstreamed, streamed (someone listens for tokens), unstreamed again: the last two find the prompts cached alike,
    and their completions are equal field by field (text, tokens, log-probabilities, finish reason, prompt tokens,
    cached prompt tokens)."""
    each_engine.generate(conversations(), LONG)  # the prompts cached for both runs compared
    events: dict[int, list[str]] = defaultdict(list)
    written: dict[int, int] = defaultdict(int)
    read: dict[int, int] = defaultdict(int)

    def on_tokens(index: int, new_written: int, new_read: int) -> None:
        events[index].append("tokens")
        written[index] += new_written
        read[index] += new_read

    control = CallControl(on_tokens=on_tokens, on_finished=lambda index: events[index].append("finished"))
    streamed = each_engine.generate(conversations(), LONG, control)
    unstreamed = each_engine.generate(conversations(), LONG)
    assert streamed == unstreamed
    for index, completion in enumerate(streamed):
        assert completion.error is None and len(completion.tokens) > 2
        assert written[index] == len(completion.tokens)
        assert read[index] == completion.prompt_tokens - completion.cached_prompt_tokens
        # Heard as it was written: several reports, all before its end.
        assert events[index][-1] == "finished" and events[index].count("tokens") >= 2
