"""bench.rule_variants reads each check back from the evidence line the rule writes: the two must agree."""

from __future__ import annotations

import pytest

import prompts
from bench.rule_variants import VARIANTS, read_checks
from juiz.judging.check_rule import apply_rule
from schemas.judgement import CheckResult


def _result(spec: prompts.CheckSpec, p_yes: float, target: str | None = None) -> CheckResult:
    fields = {"name": spec.name, "question": spec.question, "role": spec.role, "yes_means": spec.yes_means}
    return CheckResult.model_validate({**fields, "target": target, "p_yes": p_yes, "mass": 0.99, "status": "ok"})


def test_checks_read_back_from_the_evidence_are_the_values_the_rule_combined() -> None:
    template = prompts.load("answer_relevance", "checks-7", "en")
    spec = {c.name: c for c in template.checks}
    checks = [
        _result(spec["answers_question"], 0.71),
        _result(spec["attempts_answer"], 0.82),
        _result(spec["specific"], 0.65),
        _result(spec["only_answer"], 0.88),
        _result(spec["sentence_to_grader"], 0.32, "Paris is the capital."),
        _result(spec["sentence_to_grader"], 0.47, "It has been since 508."),
        *(_result(spec["covers"], p, f"point {p}") for p in (0.98, 0.35, 0.9)),
    ]
    outcome = apply_rule(template, checks)
    read = read_checks(outcome.text)
    assert read["answers_question"] == [0.71] and read["specific"] == [0.65] and read["only_answer"] == [0.88]
    assert read["sentence_to_grader"] == pytest.approx([0.68, 0.53])  # P(no): yes means bad
    assert read["covers"] == [0.98, 0.35, 0.9]
    # the released variant recombines them into the rule's own strength
    strength, vetoed = VARIANTS["released"].strength(read, 0.0)
    assert strength == pytest.approx(outcome.strength, abs=0.005) and not vetoed
