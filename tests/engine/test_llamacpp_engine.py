"""Real llama.cpp generation on SmolLM2-135M's GGUF: the reply grammar, P(yes) by token id, prompt caching, and what
results record about the engine."""

from __future__ import annotations

from typing import Any

import pytest

from juiz.engines.base import GenerationRequest
from juiz.engines.models import TEST_MODEL
from juiz.judging.checks import CHECK_REQUEST
from juiz.judging.judge import Judge
from schemas import BatchOptions, Triple

pytestmark = pytest.mark.engine


def test_the_reply_grammar_holds_even_for_a_model_that_would_not_follow_it(tiny_llamacpp_engine: Any) -> None:
    grammar = 'root ::= "Score: " [0-3]'
    conversation = [{"role": "user", "content": "Tell me a long story about dragons."}]
    [completion] = tiny_llamacpp_engine.generate([conversation], GenerationRequest(max_tokens=8, grammar=grammar))
    assert completion.error is None
    assert completion.text in {f"Score: {d}" for d in "0123"}
    assert completion.top_logprobs, "log-probabilities of every generated token"


def test_p_yes_is_read_by_token_id_and_agrees_with_the_greedy_reply(tiny_llamacpp_engine: Any) -> None:
    conversation = [{"role": "user", "content": "Is Paris the capital of France? Reply with one word: Yes or No."}]
    [completion] = tiny_llamacpp_engine.generate([conversation], CHECK_REQUEST)
    assert completion.word_probs is not None
    yes, no = completion.word_probs
    assert 0.0 < yes + no <= 1.0 + 1e-6
    groups = tiny_llamacpp_engine.token_groups(CHECK_REQUEST.word_groups)
    assert all(groups) and not set(groups[0]) & set(groups[1])
    first = completion.text.strip().casefold()
    if first in ("yes", "no"):
        assert (yes >= no) == (first == "yes")


def test_a_shared_prefix_is_computed_once_and_reported_as_cached(tiny_llamacpp_engine: Any) -> None:
    shared = "You grade answers. " + "Be strict and brief. " * 40
    conversations = [
        [{"role": "system", "content": shared}, {"role": "user", "content": f"Is {n} even? Yes or No."}]
        for n in range(6)
    ]
    completions = tiny_llamacpp_engine.generate(conversations, CHECK_REQUEST)
    assert all(c.error is None and c.prompt_tokens > 200 for c in completions)
    # The engine pins conversations sharing a prefix to one slot (juiz.engines.slots): the prefix is computed once,
    # and every later conversation reuses it.
    assert sum(c.cached_prompt_tokens > 200 for c in completions) == len(conversations) - 1


def test_results_record_llama_cpp_and_the_quantisation(tiny_llamacpp_engine: Any) -> None:
    triple = Triple(id="a", question="What is the capital of France?", answer="Paris.")
    [result] = Judge(tiny_llamacpp_engine).grade([triple], BatchOptions(prompt="answer_relevance@juiz-1"))
    provenance = result.provenance
    assert provenance is not None
    assert provenance.model == TEST_MODEL
    assert provenance.engine == "llamacpp" and provenance.engine_quantisation == "Q4_1"
    assert provenance.engine_host is None and provenance.engine_dtype is None
