"""Several sampled replies per item through real vLLM (SamplingParams.n): one request, n replies, each parsed."""

from __future__ import annotations

import pytest

from juiz.engines.base import JudgeEngine
from juiz.judging.judge import Judge
from schemas import BatchOptions, Triple

pytestmark = pytest.mark.engine
# Samples are CoT replies (a check-based prompt draws none): these tests pin the CoT prompt (the defaults are checks).
COT = "answer_relevance@juiz-1"


def test_n_samples_come_back_from_one_request(tiny_engine: JudgeEngine) -> None:
    items = [
        Triple(id="a", question="What is the capital of Australia?", answer="Canberra."),
        Triple(id="b", question="Why does Python have a GIL?", answer="Python is popular."),
    ]
    results = Judge(tiny_engine).grade(items, BatchOptions(prompt=COT, samples=3))
    for result in results:
        assert result.samples is not None
        assert result.samples.n == 3 and len(result.samples.scores) == 3
        assert result.samples.temperature == 0.7
        assert result.provenance.sampling["n"] == 3
        parsed = [s for s in result.samples.scores if s is not None]
        if parsed:  # the majority is one of the replies' scores, and the result's score
            assert result.score == result.samples.majority and result.score in parsed
        assert result.uncertain is not None


def test_sampled_replies_survive_chunked_prefill(tiny_engine: JudgeEngine) -> None:
    """Regression: seeded sampled requests on CPU killed the engine ("CPU Generator does not use offset") as soon as
    a step's token budget cut one of them mid-prefill. Enough long items that several steps are split that way."""
    filler = " ".join(f"Segment {k} of the lecture covers point {k} of the topic in some detail." for k in range(40))
    items = [Triple(id=f"long{i}", question=f"What does part {i} cover? ({i})", answer=filler) for i in range(16)]
    results = Judge(tiny_engine).grade(items, BatchOptions(prompt=COT, samples=5))
    assert [r.status.value for r in results if r.status.value == "failed"] == []
    assert all(r.samples is not None and r.samples.n == 5 for r in results)
    assert tiny_engine.in_flight == 0
