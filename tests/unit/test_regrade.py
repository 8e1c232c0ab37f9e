"""bench.regrade asks only the checks a version adds to a kept grading, and says whether a cell's labels agree better
than the baseline's as `juiz compare` does: paired differences on the same items and McNemar's test."""

from __future__ import annotations

import pytest

from bench.labelled import CELLS
from bench.regrade import DifferentConversations, ask_new_checks, new_check_asks, paired, regraded
from juiz.engines.base import Conversation
from juiz.engines.fake import FakeEngine
from juiz.judging.judge import Judge
from schemas import BatchOptions, Triple
from schemas.judgement import Judgement, MetricResult, MetricStatus, Provenance

QUESTION = "What is the capital of France, and how many people live there?"
CONTEXT = "Paris is the capital of France. It has about two million people."

PROVENANCE = Provenance(prompt="answer_relevance@checks-19.en", prompt_sha256="0" * 64, model="fake", sampling={},
                        juiz_version="0")  # fmt: skip


def labelled(index: int, label: str, relevance: int, groundedness: int) -> Judgement:
    metrics = {
        name: MetricResult(status=MetricStatus.OK, score=score, normalized_score=score / 3)
        for name, score in (("answer_relevance", relevance), ("groundedness", groundedness))
    }
    return Judgement(id=f"i{index}", question="q?", answer="a.", status="ok", metrics=metrics, provenance=PROVENANCE,
                     manual_label=label)  # fmt: skip


LABELS = ["C", "P", "I"] * 6


def test_the_same_labels_differ_by_nothing_and_mcnemar_finds_no_discordant_item() -> None:
    before = [labelled(i, label, 3, 3) for i, label in enumerate(LABELS)]
    compared = paired(before, before, resamples=50)
    assert compared["accuracy"]["difference"] == 0.0
    assert compared["mcnemar"] == {"only_baseline_right": 0, "only_cell_right": 0, "p_value": 1.0}


def test_a_cell_that_labels_every_item_right_is_better_on_every_statistic() -> None:
    right = {"C": (3, 3), "P": (2, 2), "I": (0, 0)}
    before = [labelled(i, label, 3, 3) for i, label in enumerate(LABELS)]
    after = [labelled(i, label, *right[label]) for i, label in enumerate(LABELS)]
    compared = paired(before, after, resamples=50)
    assert compared["accuracy"] == {"a": 0.333, "b": 1.0, "difference": 0.667, "ci95": compared["accuracy"]["ci95"]}
    low, _ = compared["accuracy"]["ci95"]  # type: ignore[misc]
    assert low > 0
    assert compared["mcnemar"]["only_cell_right"] == 12 and compared["mcnemar"]["only_baseline_right"] == 0
    assert compared["mcnemar"]["p_value"] < 0.01


def graded_by(version: str) -> Judgement:
    """One item graded on the FAKE engine with answer relevance at `version` and groundedness checks-8."""
    triple = Triple(id="q1-a0", question=QUESTION, answer="Paris is the capital of France.", context=CONTEXT)
    options = BatchOptions.model_validate(
        {"metrics": ["answer_relevance", "groundedness"], "lang": "en",
         "prompt": [f"answer_relevance@{version}", "groundedness@checks-8"]}
    )  # fmt: skip
    [result] = Judge(FakeEngine(says_yes)).grade([triple], options)
    return result


def says_yes(conversation: Conversation) -> str:
    if "as a list of its key points" in conversation[-1]["content"]:
        return "- Paris is the capital of France.\n- About two million people live in Paris."
    return "No" if "grader" in conversation[0]["content"] else "Yes"


def test_only_the_checks_a_version_adds_are_asked_and_the_grading_then_reads_it_exactly_as_the_engine_would() -> None:
    kept = graded_by("checks-19")
    pending = new_check_asks([kept], CELLS["triad-2"])
    assert [(metric, ask.check.name) for _, metric, ask in pending] == [("answer_relevance", "addresses_question")]
    with pytest.raises(DifferentConversations):
        regraded(kept, CELLS["triad-2"])
    engine = FakeEngine(says_yes)
    [completed], asked = ask_new_checks([kept], CELLS["triad-2"], engine)
    assert asked == 1
    assert engine.calls == [1]
    assert new_check_asks([completed], CELLS["triad-2"]) == []  # asked once
    read = regraded(completed, CELLS["triad-2"])
    direct = graded_by("checks-21")
    for metric in ("answer_relevance", "groundedness"):
        mine, theirs = (read.metrics or {})[metric], (direct.metrics or {})[metric]
        assert (mine.score, mine.strength) == (theirs.score, theirs.strength)
    assert (read.metrics or {})["completeness"].status is MetricStatus.OK
    assert not new_check_asks([kept], CELLS["triad-1"])  # checks-20 asks nothing checks-19 did not
