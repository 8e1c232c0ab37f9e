"""The FAKE worker's replies (bench/fake_worker.py): what the tests and the benchmarks grade without a model."""

from __future__ import annotations

import prompts
from bench.fake_worker import fake_reply
from juiz.judging.parsing import parse_reply


def cot(question: str) -> list[dict[str, str]]:
    template = prompts.load("answer_relevance", "juiz-1", "en")
    return template.render(mode="cot", question=question, answer="An answer.")


def test_a_reply_scores_the_number_that_ends_the_tests_or_the_benchmarks_tag() -> None:
    assert parse_reply(fake_reply(cot("[item-7] Why?"))).score == 3  # the tests' tag: 7 mod 4
    assert parse_reply(fake_reply(cot("[backlog-w1-0-0-49] Why?"))).score == 1  # bench.common's: 49 mod 4
    assert parse_reply(fake_reply(cot("Why, with no tag?"))).score == 2
