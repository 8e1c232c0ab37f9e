"""Answer relevance alone, checks-18: checks-15's conversations word for word, its grader-flag veto read with a wider
baseline margin; and bench.relevance_alone's research reading with covers max as a fourth core value."""

from __future__ import annotations

import pytest

import prompts
from bench.relevance_alone import covers_max, with_covers
from juiz.judging.check_rule import apply_rule
from schemas.judgement import CheckResult

ONCE = {"answers_question": 0.8, "attempts_answer": 0.9, "specific": 0.7, "only_answer": 0.9}


def result(name: str, role: str, p_yes: float, target: str | None = None, yes_means: str = "good") -> CheckResult:
    fields = {"role": role, "yes_means": yes_means, "target": target, "p_yes": p_yes, "mass": 0.99, "status": "ok"}
    return CheckResult.model_validate({"name": name, "question": "Q?", **fields})


def checks(sentence_flag: float, point_flag: float, covers: dict[str, float] | None = None) -> list[CheckResult]:
    """checks-14's recorded results for one item: the item checks, one sentence flagged `sentence_flag` (P(yes) that
    it speaks to a grader), one reference point flagged `point_flag`, and covers per point where given."""
    roles = {"attempts_answer": "veto"}
    return [
        *(result(name, roles.get(name, "core"), p) for name, p in ONCE.items()),
        result("sentence_to_grader", "veto", sentence_flag, "The answer's sentence.", "bad"),
        result("point_to_grader", "info", point_flag, "The judge's point.", "bad"),
        *(result("covers", "scale", p, point) for point, p in (covers or {}).items()),
    ]


@pytest.mark.parametrize("lang", ["en", "pt"])
def test_checks_18_asks_checks_15s_conversations_word_for_word(lang: str) -> None:
    fifteen, eighteen = (prompts.load("answer_relevance", v, lang) for v in ("checks-15", "checks-18"))
    for field in ("system", "user", "user_reference", "reference", "reference_max_tokens", "reply_check", "checks"):
        assert getattr(eighteen, field) == getattr(fifteen, field), field
    assert fifteen.rule is not None and eighteen.rule is not None
    assert (fifteen.rule.baseline_margin, eighteen.rule.baseline_margin) == (0.12, 0.20)
    assert eighteen.rule.veto_below == fifteen.rule.veto_below
    assert eighteen.rule == prompts.load("answer_relevance", "checks-18", "en").rule


def test_checks_18_no_longer_caps_a_sentence_a_little_more_grader_like_than_the_judges_points() -> None:
    """A sentence 0.10 more "grader-directed" than the judge's own point: checks-15 caps the answer at 0.58, under
    its cut for score 2; checks-18 at 0.75, over its own. Beyond 0.20 checks-18 still vetoes."""
    fifteen, eighteen = (prompts.load("answer_relevance", v, "en") for v in ("checks-15", "checks-18"))
    assert fifteen.rule is not None and eighteen.rule is not None
    near = checks(sentence_flag=0.2, point_flag=0.1)
    capped, kept = apply_rule(fifteen, near), apply_rule(eighteen, near)
    assert capped.strength == pytest.approx(1 - 0.5 * 0.1 / 0.12, abs=1e-6) and capped.score == 1
    assert kept.strength == pytest.approx(0.75, abs=1e-6) and kept.score == 3
    far = apply_rule(eighteen, checks(sentence_flag=0.35, point_flag=0.1))
    assert far.score == 0 and "vetoed: sentence_to_grader" in far.supporting_evidence


def test_covers_max_is_a_fourth_core_value_under_the_same_vetoes() -> None:
    eighteen = prompts.load("answer_relevance", "checks-18", "en")
    recorded = checks(sentence_flag=0.1, point_flag=0.1, covers={"first": 0.2, "second": 0.9})
    assert covers_max(recorded) == 0.9
    strength, vetoed = with_covers(eighteen, recorded)
    core = (ONCE["answers_question"] + ONCE["specific"] + ONCE["only_answer"] + 0.9) / 4
    assert strength == pytest.approx(core) and not vetoed
    # without covers the reading is checks-18's own strength
    assert apply_rule(eighteen, recorded).strength == pytest.approx(
        (ONCE["answers_question"] + ONCE["specific"] + ONCE["only_answer"]) / 3, abs=1e-6
    )
    refused = [*recorded[:1], result("attempts_answer", "veto", 0.3), *recorded[2:]]
    strength, vetoed = with_covers(eighteen, refused)
    assert vetoed and strength == pytest.approx(0.3)
    assert covers_max(checks(0.1, 0.1)) is None
