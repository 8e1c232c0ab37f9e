"""Several sampled replies per item through real vLLM (SamplingParams.n): one request, n replies, each parsed."""

from __future__ import annotations

import pytest

from juiz.engine import JudgeEngine
from juiz.judge import Judge
from schemas import BatchOptions, Triple

pytestmark = pytest.mark.engine


def test_n_samples_come_back_from_one_request(tiny_engine: JudgeEngine) -> None:
    items = [
        Triple(id="a", question="What is the capital of Australia?", answer="Canberra."),
        Triple(id="b", question="Why does Python have a GIL?", answer="Python is popular."),
    ]
    results = Judge(tiny_engine).grade(items, BatchOptions(samples=3))
    for result in results:
        assert result.samples is not None
        assert result.samples.n == 3 and len(result.samples.scores) == 3
        assert result.samples.temperature == 0.7
        assert result.provenance.sampling["n"] == 3
        parsed = [s for s in result.samples.scores if s is not None]
        if parsed:  # the majority is one of the replies' scores, and the result's score
            assert result.score == result.samples.majority and result.score in parsed
        assert result.uncertain is not None
