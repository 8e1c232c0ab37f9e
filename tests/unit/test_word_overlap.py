"""Answer relevance checks-17 (rule-8): each key point read half from the judge's covers and half from the share of
the point's words the answer uses, on checks-14's very conversations."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import prompts
from bench.labelled import CELLS, read_judgements
from bench.regrade import DifferentConversations, regraded, same_conversations
from juiz.engines.fake import FakeEngine
from juiz.judging.check_rule import apply_rule, check_values
from juiz.judging.checks import CheckJob
from juiz.judging.judge import Judge
from juiz.judging.word_overlap import content_words, share, with_counted
from schemas import BatchOptions, Triple
from schemas.judgement import CheckResult, CheckStatus, MetricStatus

RESULTS = Path(__file__).parents[2] / "bench" / "results" / "judgements"


def test_content_words_ignore_case_accents_short_words_and_endings_but_keep_numbers() -> None:
    assert content_words("The Índices of a TABLE") == {"indic", "table"}
    assert content_words("in 7 days") == {"days", "7"}
    # plurals and inflections meet by their first letters, in either language
    assert share("Cromossomos alinham-se na placa", "o cromossomo se alinha na placa") == 1.0
    assert share("Indexes occupy memory", "an index occupies memory") == 1.0
    # the limit of a stemmer that needs no language: words meet only when they share their first five letters
    assert share("writes", "writing") == 0.0


def test_share_counts_the_points_words_the_answer_uses() -> None:
    assert share("Paris is the capital of France", "Paris, of course.") == pytest.approx(1 / 3)
    assert share("Paris is the capital of France", "Berlin.") == 0.0
    assert share("it is so", "it is so") is None  # a point with no word to count


def covers(p_yes: float, point: str) -> CheckResult:
    return CheckResult(
        name="covers", question="Does the ANSWER state the FACT?", role="scale", p_yes=p_yes, status=CheckStatus.OK,
        target=point,
    )  # fmt: skip


def test_only_checks_with_a_words_weight_get_word_shares() -> None:
    seventeen = prompts.load("answer_relevance", "checks-17", "en")
    fourteen = prompts.load("answer_relevance", "checks-14", "en")
    results = [covers(0.2, "Paris is the capital of France")]
    [counted] = with_counted(seventeen, results, "What is the capital of France?", "Paris is France's capital.")
    assert counted.words == 1.0
    [untouched] = with_counted(fourteen, results, "What is the capital of France?", "Paris is France's capital.")
    assert untouched.words is None


def test_rule_8_reads_each_point_as_half_the_judge_and_half_the_words() -> None:
    template = prompts.load("answer_relevance", "checks-17", "en")
    # no point_needed read: each point weighs half, so the weighted mean is the plain mean
    results = [replace_words(covers(0.2, "p"), 1.0), replace_words(covers(0.6, "q"), 0.0)]
    assert check_values(template, results)["covers"] == pytest.approx((0.6 + 0.3) / 2)
    # a point with no word to count is read by the judge alone
    assert check_values(template, [covers(0.2, "it is so")])["covers"] == pytest.approx(0.2)


def replace_words(result: CheckResult, words: float) -> CheckResult:
    return result.model_copy(update={"words": words})


def test_a_words_weight_is_only_for_a_per_point_check_between_0_and_1() -> None:
    fourteen = prompts.load("answer_relevance", "checks-14", "en")
    assert fourteen.rule is not None
    once = replace(fourteen.checks[0], words_weight=0.5)
    with pytest.raises(prompts.PromptSchemaError, match=r"words_weight is for a check asked per_point"):
        prompts._linked((once,), fourteen.rule, "x")
    point = next(c for c in fourteen.checks if c.name == "point_needed")
    for bad in (0.0, 1.0, True, "half"):
        with pytest.raises(prompts.PromptSchemaError, match="words_weight must be a number between 0 and 1"):
            prompts._linked((replace(point, words_weight=bad),), fourteen.rule, "x")  # type: ignore[arg-type]


@pytest.mark.parametrize("lang", ["en", "pt"])
def test_checks_17_asks_checks_14s_conversations_word_for_word(lang: str) -> None:
    fourteen, seventeen = (prompts.load("answer_relevance", v, lang) for v in ("checks-14", "checks-17"))
    assert same_conversations(fourteen, seventeen)
    fields = {"question": "Q?", "context": "C.", "answer": "A first sentence here. A second one there."}
    jobs = [CheckJob.plan(0, "answer_relevance", t, fields) for t in (fourteen, seventeen)]
    asked = [[str(a.conversation) for a in job.asks("- one point\n- another point")[0]] for job in jobs]
    assert asked[0] == asked[1] and asked[0]
    # a reference of other points is other conversations: only the engine can grade it
    assert not same_conversations(fourteen, prompts.load("answer_relevance", "checks-16", lang))


def judge_says_capital_only(conversation: list[dict[str, str]]) -> str:
    """A FAKE judge: a two-point reference; covers says No to every point (the small judge missing what a dense
    answer states); every other check passes."""
    user = conversation[-1]["content"]
    if "as a list of its key points" in user:
        return "- Paris is the capital of France.\n- About two million people live in Paris."
    if "<fact>" in user:
        return "No"
    if "grader" in conversation[0]["content"]:
        return "No"
    return "Yes"


def test_a_graded_result_carries_the_word_shares_and_says_so_in_its_evidence() -> None:
    item = Triple(
        id="q1", question="What is the capital of France, and how many live there?",
        answer="Paris is the capital of France; about two million people live in Paris.",
        context="Paris is the capital of France. It has about two million people.",
    )  # fmt: skip
    chosen = BatchOptions.model_validate({"metrics": ["answer_relevance"], "prompt": ["answer_relevance@checks-17"]})
    [result] = Judge(FakeEngine(judge_says_capital_only)).grade([item], chosen)
    relevance = (result.metrics or {})["answer_relevance"]
    assert relevance.status is MetricStatus.OK and relevance.checks
    points = [c for c in relevance.checks if c.name == "covers"]
    assert [c.words for c in points] == [1.0, 1.0]
    assert "share of each point's words the answer uses: 1.00, 1.00" in (relevance.raw_output or "")
    # the judge's No alone would read the points as unstated; the words lift them halfway
    template = prompts.load("answer_relevance", "checks-14", "en")
    alone = apply_rule(template, relevance.checks)
    assert relevance.strength is not None and alone.strength is not None and relevance.strength > alone.strength


def test_regrading_a_kept_grading_under_its_own_versions_reproduces_it() -> None:
    kept = read_judgements(RESULTS / "test_checks-14.jsonl.gz")[:12]
    for judgement in kept:
        again = regraded(judgement, CELLS["checks-14"])
        for name, metric in (judgement.metrics or {}).items():
            redone = (again.metrics or {})[name]
            assert (redone.score, redone.strength) == (metric.score, metric.strength)


def test_regrading_refuses_a_version_that_asks_other_conversations() -> None:
    [judgement] = read_judgements(RESULTS / "test_checks-14.jsonl.gz")[:1]
    with pytest.raises(DifferentConversations, match="checks-16"):
        regraded(judgement, CELLS["checks-16"])
