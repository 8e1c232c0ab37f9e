"""Completeness as a metric of its own beside answer relevance alone, on the FAKE engine: the same conversations as
answer relevance checks-8 (no extra engine work), and the verdict over the triad."""

from __future__ import annotations

from dataclasses import replace

import pytest

import prompts
from bench.regrade import asks_within
from juiz.agreement.labels import DEFAULT_VERDICT, TRIAD_VERDICT, label_for, label_rule
from juiz.engines.base import Conversation
from juiz.engines.fake import FakeEngine
from juiz.judging.checks import CheckJob
from juiz.judging.judge import Judge
from schemas import BatchOptions, LabelMapping, Triple
from schemas.judgement import Judgement, MetricResult, MetricStatus, Provenance

QUESTION = "What is the capital of France, and how many people live there?"
CONTEXT = "Paris is the capital of France. It has about two million people."


def options(*prompt_ids: str) -> BatchOptions:
    return BatchOptions.model_validate(
        {"metrics": [p.split("@")[0] for p in prompt_ids], "prompt": list(prompt_ids), "lang": "en"}
    )


BEFORE = options("answer_relevance@checks-8", "groundedness@checks-4")
TRIAD = options("answer_relevance@checks-9", "completeness@checks-1", "groundedness@checks-4")


def states_the_capital_only(conversation: Conversation) -> str:
    """A FAKE judge: its reference lists two points; the answer states the first of them only; every other check
    says yes (the grader flag, where yes is bad, no)."""
    user = conversation[-1]["content"]
    if "as a list of its key points" in user:
        return "- Paris is the capital of France.\n- About two million people live in Paris."
    if "<fact>" in user and "<answer>" in user:  # covers
        return "Yes" if "capital" in user.split("<fact>")[-1] else "No"
    if "grader" in conversation[0]["content"]:
        return "No"
    return "Yes"


def item() -> Triple:
    return Triple(id="q1-a0", question=QUESTION, answer="Paris is the capital of France.", context=CONTEXT)


@pytest.mark.parametrize(
    ("whole", "relevance", "completeness"),
    [
        ("checks-8", "checks-9", "checks-1"),
        ("checks-14", "checks-15", "checks-2"),
        ("checks-17", "checks-15", "checks-3"),
    ],
)
def test_completeness_asks_answer_relevances_reference_and_points_word_for_word(
    whole: str, relevance: str, completeness: str
) -> None:
    """completeness and relevance alone split one answer-relevance version's checks between them, conversation for
    conversation, so a batch grading both sends what that version alone sends."""
    for lang in ("en", "pt"):
        eight, nine, complete = (
            prompts.load(m, v, lang)
            for m, v in (
                ("answer_relevance", whole),
                ("answer_relevance", relevance),
                ("completeness", completeness),
            )
        )
        fields = {"question": QUESTION, "context": CONTEXT, "answer": "Paris."}
        jobs = [CheckJob.plan(0, t.metric, t, fields) for t in (eight, nine, complete)]
        assert len({str(job.reference_conversation()) for job in jobs}) == 1
        reference = "- Paris is the capital of France.\n- About two million people live in Paris."
        asked = [{str(a.conversation) for a in job.asks(reference)[0] if a.check.ask == "per_point"} for job in jobs]
        # checks-9 keeps only the grader flag's baseline; completeness asks the key points: checks-8 asks both
        assert asked[1] | asked[2] == asked[0] and not asked[1] & asked[2]
        by_name = {c.name: c for c in eight.checks}
        assert [replace(c, role=by_name[c.name].role) for c in complete.checks] == [
            by_name["covers"],
            by_name["point_needed"],
        ]
        assert [c.name for c in nine.checks] == [
            c.name for c in eight.checks if c.name not in ("covers", "point_needed")
        ]
        assert all(c == by_name[c.name] for c in nine.checks)
        assert [c.role for c in complete.checks] == ["core", "info"] and complete.checks[
            0
        ].weighted_by == "point_needed"


def test_grading_completeness_beside_relevance_sends_no_more_conversations_than_checks_8() -> None:
    # Two answers to one question: their references and the checks that hold no answer are shared in both designs.
    triples = [item(), item().model_copy(update={"id": "q1-a1", "answer": "It is Paris, with two million people."})]
    sent = {}
    for name, chosen in (("before", BEFORE), ("triad", TRIAD)):
        engine = FakeEngine(states_the_capital_only)
        Judge(engine).grade(triples, chosen)
        sent[name] = sum(engine.calls)
    assert sent["triad"] == sent["before"]
    engine = FakeEngine(states_the_capital_only)
    Judge(engine).grade(triples, options("answer_relevance@checks-8", "completeness@checks-1", "groundedness@checks-4"))
    assert sum(engine.calls) == sent["before"]


def test_a_relevant_answer_that_states_part_of_the_judges_points_is_relevant_incomplete_and_partial() -> None:
    [before] = Judge(FakeEngine(states_the_capital_only)).grade([item()], BEFORE)
    [triad] = Judge(FakeEngine(states_the_capital_only)).grade([item()], TRIAD)
    metrics = triad.metrics or {}
    assert metrics["answer_relevance"].score == 3  # it addresses the question
    complete = metrics["completeness"]
    assert complete.status is MetricStatus.OK and complete.score == 2  # one of the two points
    assert complete.provenance is not None and complete.provenance.prompt == "completeness@checks-1.en"
    assert "about 50% of the key points" in (complete.supporting_evidence or "")
    # the verdict reads the three: relevant and supported but incomplete is P
    assert triad.label_source == "verdict" and triad.automated_label == "P" and triad.score == 2
    # checks-8 multiplies the same points into answer relevance itself
    relevance_before = (before.metrics or {})["answer_relevance"]
    assert relevance_before.score is not None and relevance_before.score < 3


def test_the_triad_verdict_applies_only_when_completeness_was_graded() -> None:
    [triad] = Judge(FakeEngine(states_the_capital_only)).grade([item()], TRIAD)
    [before] = Judge(FakeEngine(states_the_capital_only)).grade([item()], BEFORE)
    mapping = LabelMapping()
    with_triad, without = label_rule(triad, mapping), label_rule(before, mapping)
    assert with_triad is not None and with_triad.verdict == list(TRIAD_VERDICT)
    assert without is not None and without.verdict == list(DEFAULT_VERDICT)


def test_completeness_without_a_context_is_skipped_and_the_verdict_falls_back_to_the_main_metric() -> None:
    bare = item().model_copy(update={"context": None})
    [result] = Judge(FakeEngine(states_the_capital_only)).grade([bare], TRIAD)
    metrics = result.metrics or {}
    assert metrics["completeness"].status is MetricStatus.SKIPPED
    assert result.label_source == "answer_relevance"


def test_the_default_completeness_beside_the_default_answer_relevance_sends_no_conversation_more() -> None:
    """completeness@checks-3 asks checks-17's (checks-14's) reference and points: grading it beside the default answer
    relevance costs nothing more (checks-1, checks-8's, wrote a reference and asked the points again in its own
    layout)."""
    triples = [item(), item().model_copy(update={"id": "q1-a1", "answer": "It is Paris, with two million people."})]
    sent = {}
    for name, metrics in (
        ("relevance", ["answer_relevance", "groundedness"]),
        ("with completeness", ["answer_relevance", "completeness", "groundedness"]),
    ):
        engine = FakeEngine(states_the_capital_only)
        [graded, _] = Judge(engine).grade(triples, BatchOptions(metrics=metrics, lang="en"))
        sent[name] = sum(engine.calls)
    assert prompts.DEFAULT_VERSIONS["completeness"] == "checks-3"
    assert sent["with completeness"] == sent["relevance"]
    complete = (graded.metrics or {})["completeness"]
    assert complete.status is MetricStatus.OK and complete.checks
    assert complete.provenance is not None and complete.provenance.prompt == "completeness@checks-3.en"


@pytest.mark.parametrize("version", ["checks-9", "checks-15", "checks-20"])
def test_relevance_alone_is_selectable_and_not_the_default(version: str) -> None:
    assert prompts.DEFAULT_VERSIONS["answer_relevance"] == "checks-19"
    assert prompts.load("answer_relevance", version, "pt").rule == prompts.load("answer_relevance", version, "en").rule


def test_beside_completeness_the_default_answer_relevance_is_relevance_alone() -> None:
    """Requested with completeness and no version of its own, answer relevance reads whether the answer addresses the
    question (checks-20): the key points are completeness's, and counted in both a relevant, incomplete answer would
    sink below P. A version named in the request still wins."""
    triad = BatchOptions(metrics=["answer_relevance", "completeness", "groundedness"], lang="en")
    [graded] = Judge(FakeEngine(states_the_capital_only)).grade([item()], triad)
    metrics = graded.metrics or {}
    assert metrics["answer_relevance"].provenance is not None
    assert metrics["answer_relevance"].provenance.prompt == "answer_relevance@checks-20.en"
    assert metrics["answer_relevance"].score == 3 and metrics["completeness"].status is MetricStatus.OK
    assert graded.label_source == "verdict"
    named = triad.model_copy(update={"prompt": ["answer_relevance@checks-19"]})
    [whole] = Judge(FakeEngine(states_the_capital_only)).grade([item()], named)
    assert (whole.metrics or {})["answer_relevance"].provenance.prompt == "answer_relevance@checks-19.en"  # type: ignore[union-attr]
    alone = BatchOptions(metrics=["answer_relevance", "groundedness"], lang="en")
    [two] = Judge(FakeEngine(states_the_capital_only)).grade([item()], alone)
    assert (two.metrics or {})["answer_relevance"].provenance.prompt == "answer_relevance@checks-19.en"  # type: ignore[union-attr]


def graded(**scores: int) -> Judgement:
    metrics = {m: MetricResult(status=MetricStatus.OK, score=s, normalized_score=s / 3) for m, s in scores.items()}
    provenance = Provenance(
        prompt="answer_relevance@checks-20.en", prompt_sha256="0" * 64, model="fake", sampling={}, juiz_version="0"
    )
    return Judgement(id="x", question=QUESTION, answer="a", status="ok", metrics=metrics, provenance=provenance)


@pytest.mark.parametrize(
    ("relevance", "completeness", "groundedness", "label"),
    [
        (3, 3, 3, "C"),
        (3, 0, 3, "P"),  # addresses the question, fully supported, leaves points out
        (2, 2, 3, "P"),
        (3, 3, 2, "I"),  # the context only partly supports it
        (1, 3, 3, "I"),  # does not address the question
    ],
)
def test_the_triad_verdict_gates_c_on_completeness_and_every_label_above_i_on_full_support(
    relevance: int, completeness: int, groundedness: int, label: str
) -> None:
    result = graded(answer_relevance=relevance, completeness=completeness, groundedness=groundedness)
    assert label_for(result, LabelMapping()) == label


@pytest.mark.parametrize("lang", ["en", "pt"])
def test_the_triad_is_read_from_the_default_answer_relevances_conversations(lang: str) -> None:
    """bench.regrade reads the triad from a grading by answer relevance checks-19: relevance alone and completeness
    each ask a part of its conversations, and nothing it did not ask."""
    nineteen = prompts.load("answer_relevance", "checks-19", lang)
    assert asks_within(nineteen, prompts.load("answer_relevance", "checks-20", lang))
    assert asks_within(nineteen, prompts.load("completeness", "checks-3", lang))
    assert not asks_within(nineteen, prompts.load("answer_relevance", "checks-16", lang))
    assert not asks_within(prompts.load("answer_relevance", "checks-20", lang), nineteen)
