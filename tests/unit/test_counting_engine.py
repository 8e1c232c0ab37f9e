"""The benches' counting engine records each engine call: its size, the prompt tokens computed, and which kind of
conversation computed them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from bench.judge_quality import CountingEngine
from juiz.engines.base import CallControl, Completion, Conversation, GenerationRequest


class CountedEngine:
    """A stand-in engine whose replies say each prompt's length, a cached part of 10 tokens and a one-token reply."""

    model_id = "counted"
    origin: ClassVar[dict[str, str]] = {}

    def generate(
        self, conversations: Sequence[Conversation], request: GenerationRequest, control: CallControl | None = None
    ) -> list[Completion]:
        return [
            Completion(
                text="Yes",
                tokens=["Yes"] if request.logprobs else [],  # as vLLM: no log-probabilities, no tokens
                prompt_tokens=len(c[-1]["content"]),
                cached_prompt_tokens=10,
                reply_tokens=1,
            )
            for c in conversations
        ]


def test_each_call_is_recorded_with_the_tokens_each_kind_computed() -> None:
    recorder = CountingEngine(CountedEngine())
    request = GenerationRequest(max_tokens=1)
    checks = [[{"role": "system", "content": "You check one thing."}, {"role": "user", "content": "x" * 40}]] * 2
    recorder.generate(checks, request)
    recorder.generate([[{"role": "user", "content": "y" * 30}]], GenerationRequest(max_tokens=160, logprobs=0))
    counts = recorder.take()
    first, second = counts["calls_s"]
    assert first["conversations"] == 2 and first["prompt_tokens"] == 80 and first["computed_prompt_tokens"] == 60
    assert first["computed_by_kind"] == {"one token: You check one thing.": 60}
    assert second["max_tokens"] == 160 and second["computed_by_kind"] == {"up to 160 tokens: ": 20}
    assert second["reply_tokens"] == 1 and counts["reply_tokens"] == 3  # counted by the engine, tokens or not
    assert counts["uncached_by_kind"] == first["computed_by_kind"] | second["computed_by_kind"]
    assert recorder.take()["calls_s"] == []
