"""bench.probe_readers: the engines read the very check conversation the probe's transformers reader reads."""

from __future__ import annotations

from typing import Any

import pytest

from bench.probe import Group
from bench.probe_readers import check_texts, prompt_tokens
from juiz.engines import models
from juiz.judging.probe import USER_SUFFIX, StateReader, render_context

GROUP = Group(
    passages=(
        "The Moon's gravity pulls the ocean into a bulge. Most coasts see two high tides a day.",
        "Decaf still holds 2 to 15 milligrams of caffeine per cup.",
    ),
    claims=("Most coasts see two high tides a day.", "Decaf has no caffeine at all."),
)


def _tokenizer() -> Any:
    path = models.model_dir(models.TEST_MODEL)
    if not (path / "tokenizer_config.json").exists():
        pytest.skip(f"{models.TEST_MODEL} is not pulled (juiz models pull {models.TEST_MODEL})")
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(path)


def test_each_claims_text_is_the_transformers_readers_prefix_claim_and_closing() -> None:
    tokenizer = _tokenizer()
    reader = StateReader.__new__(StateReader)  # only its prompt split is used: no model loaded
    reader.tokenizer = tokenizer
    prefix, tail = reader._split_prompt(render_context(GROUP.passages))
    texts = check_texts(tokenizer, GROUP)
    assert len(texts) == len(GROUP.claims)
    for claim, text in zip(GROUP.claims, texts, strict=True):
        assert text == tokenizer.decode(prefix) + USER_SUFFIX.format(claim=claim) + tail


def test_prompt_tokens_count_every_claims_conversation_whole() -> None:
    tokenizer = _tokenizer()
    one = Group(GROUP.passages, GROUP.claims[:1])
    both = prompt_tokens(tokenizer, GROUP)
    assert prompt_tokens(tokenizer, one) < both < 3 * prompt_tokens(tokenizer, one)
    assert both == sum(len(tokenizer.encode(t, add_special_tokens=False)) for t in check_texts(tokenizer, GROUP))
