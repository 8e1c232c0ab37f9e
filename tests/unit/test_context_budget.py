"""A context longer than the batch's budget is cut to what the question is about."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import prompts
from juiz.engines.fake import FakeEngine
from juiz.judging.judge import context_segments, shown_context
from juiz.judging.passages import within_budget
from juiz.judging.plan import plan_item
from schemas import BatchOptions, Triple

FILLER = "The meeting moved on to other business and the weather, parking and lunch plans were discussed at length. "
SEGMENTS = [
    FILLER * 3,
    "The index speeds up reads, but every insert must also update the index, so writes get slower. " + FILLER,
    FILLER * 3,
    "Indexes also take disk space: a wide index can be as large as the table itself. " + FILLER,
    FILLER * 3,
]
TRIPLE = Triple(
    id="t",
    question="Why not add an index on every column?",
    answer="Every insert must update each index, so writes get slower. Indexes also take disk space.",
    context=[{"text": s} for s in SEGMENTS],
)


def test_a_context_within_the_budget_is_shown_whole() -> None:
    segments = context_segments(TRIPLE.context)
    assert shown_context(TRIPLE, segments, None) == prompts.format_context(segments)
    assert shown_context(TRIPLE, segments, 100_000) == prompts.format_context(segments)


def test_a_long_context_keeps_the_questions_segments_with_their_numbers() -> None:
    segments = context_segments(TRIPLE.context)
    budget = len(SEGMENTS[1]) + len(SEGMENTS[3]) + 10
    shown = shown_context(TRIPLE, segments, budget)
    assert shown.startswith("[2] The index speeds up reads")
    assert "\n\n[4] Indexes also take disk space" in shown
    assert "[1]" not in shown and "[3]" not in shown and "[5]" not in shown
    assert len(shown) < sum(len(s) for s in SEGMENTS) / 2
    other_answer = TRIPLE.model_copy(update={"answer": "The weather was nice."})
    assert shown_context(other_answer, segments, budget) == shown  # one context (and prefix) for every answer


def test_every_query_gets_its_best_segment_before_any_gets_its_second() -> None:
    segments = ["apples and pears", "apples apples apples", "trains and buses", "buses buses buses"]
    budget = len(segments[1]) + len(segments[3])
    assert within_budget(segments, ["apples", "buses"], budget) == [1, 3]


def test_at_least_one_segment_is_shown_even_past_the_budget() -> None:
    assert within_budget(["a long segment about apples"], ["apples"], 5) == [0]
    assert within_budget(["only 123", "456 789"], ["apples"], 9) == [0]  # no word to weigh: the retriever's order


def test_the_budget_is_recorded_where_the_context_is_shown() -> None:
    options = BatchOptions(metrics=["answer_relevance", "groundedness", "context_relevance"], context_chars=3000)
    plan = plan_item(options, TRIPLE.question, FakeEngine(lambda _: ""))
    assert plan["groundedness"].provenance.sampling["context_chars"] == 3000
    assert "context_chars" not in plan["context_relevance"].provenance.sampling


def test_a_budget_too_small_to_show_anything_is_refused() -> None:
    with pytest.raises(ValidationError, match="context_chars"):
        BatchOptions(context_chars=10)
