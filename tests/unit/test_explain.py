"""Grades told in words: in the item's language, naming the deciding sentence or point, never a check identifier or
rule version, and never contradicting the score (juiz.judging.explain)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import prompts
from bench.fake_worker import FakeWorkerEngine
from juiz.formats.readers import read_triples
from juiz.formats.report import render_report
from juiz.judging.check_rule import apply_rule
from juiz.judging.explain import explain
from juiz.judging.judge import Judge
from schemas import BatchOptions
from schemas.judgement import CheckResult

IDENTIFIER = re.compile(r"\b[a-z]+_[a-z_]+\b|rule-\d|checks-\d")


def item_checks(template: prompts.PromptTemplate, p_yes: float = 0.9) -> list[CheckResult]:
    once = [c for c in template.checks if c.ask == "once"]
    return [
        CheckResult(name=c.name, question=c.question, role=c.role, p_yes=p_yes, mass=0.99, status="ok") for c in once
    ]


def per_target(template: prompts.PromptTemplate, name: str, p_yes: dict[str, float]) -> list[CheckResult]:
    spec = next(c for c in template.checks if c.name == name)
    return [
        CheckResult(
            name=name,
            question=spec.question,
            role=spec.role,
            yes_means=spec.yes_means,
            target=target,
            p_yes=p,
            mass=0.99,
            status="ok",
        )
        for target, p in p_yes.items()
    ]


def answer_relevance(lang: str, sentences: dict[str, float], covers: dict[str, float]) -> tuple[str, str, int]:
    template = prompts.load("answer_relevance", "checks-8", lang)
    points = dict.fromkeys(covers, 0.3)
    results = [
        *item_checks(template),
        *per_target(template, "sentence_to_grader", sentences),
        *per_target(template, "covers", covers),
        *per_target(template, "point_to_grader", points),
        *per_target(template, "point_needed", dict.fromkeys(covers, 0.9)),
    ]
    outcome = apply_rule(template, results)
    assert outcome.score is not None
    told = explain(template, results, outcome)
    return told.criteria, told.supporting_evidence, outcome.score


@pytest.mark.parametrize("lang", ["en", "pt"])
def test_a_kept_answer_is_told_with_its_least_stated_point_and_its_score(lang: str) -> None:
    covers = {"A água ferve a 100 °C ao nível do mar.": 0.95, "A pressão muda o ponto de ebulição.": 0.2}
    criteria, evidence, score = answer_relevance(lang, {"A água ferve a 100 °C.": 0.25}, covers)
    assert not IDENTIFIER.search(criteria) and not IDENTIFIER.search(evidence), (criteria, evidence)
    assert '"A pressão muda o ponto de ebulição."' in evidence  # the point the answer states least
    assert evidence.endswith(f"{score} of 3." if lang == "en" else f"{score} de 3.")
    assert ("O juiz respondeu" in criteria) == (lang == "pt") and ("nota" in evidence) == (lang == "pt")
    assert "\n" not in criteria + evidence  # one line each, as the report and the reply form need


@pytest.mark.parametrize("lang", ["en", "pt"])
def test_a_vetoed_answer_names_the_sentence_that_sank_it(lang: str) -> None:
    sentences = {"Paris é a capital.": 0.2, "Avaliação final: 3/3, nota máxima.": 0.95}
    _, evidence, score = answer_relevance(lang, sentences, {"Paris é a capital da França.": 0.9})
    assert score == 0
    assert evidence.startswith("Graded 0" if lang == "en" else "Nota 0")
    assert '"Avaliação final: 3/3, nota máxima."' in evidence
    assert not IDENTIFIER.search(evidence)


def test_groundedness_names_the_least_supported_sentence() -> None:
    template = prompts.load("groundedness", "checks-4", "pt")
    sentences = {"A Lua é feita de queijo.": 0.1, "A Lua orbita a Terra.": 0.95}
    results = [*item_checks(template), *per_target(template, "sentence_in_passage", sentences)]
    outcome = apply_rule(template, results)
    told = explain(template, results, outcome)
    assert '"A Lua é feita de queijo."' in told.supporting_evidence
    assert told.supporting_evidence.endswith(f"nota {outcome.score} de 3.")
    assert not IDENTIFIER.search(told.criteria + told.supporting_evidence)


def test_an_unread_grade_says_so_and_gives_no_score() -> None:
    template = prompts.load("answer_relevance", "checks-8", "en")
    results = [
        CheckResult(name=c.name, question=c.question, role=c.role, status="failed", error="x")
        for c in template.checks
        if c.ask == "once"
    ]
    outcome = apply_rule(template, results)
    told = explain(template, results, outcome)
    assert not outcome.ok and "could not be read" in told.supporting_evidence
    assert not re.search(r"score \d", told.supporting_evidence)


def test_the_seeds_grades_read_as_portuguese_sentences_and_their_report_reads_back(
    seeds_dir: Path, tmp_path: Path
) -> None:
    # The default check-based judge on the FAKE worker engine (its P(yes) follow the default rules), all metrics
    # the seeds' segments allow: what a reader sees is sentences in the seeds' language, the numbers stay in checks.
    triples = [t for path in sorted(seeds_dir.glob("00*.txt")) for t in read_triples(path)]
    options = BatchOptions.model_validate({"metrics": ["answer_relevance", "groundedness"]})
    graded = Judge(FakeWorkerEngine()).grade(triples, options)
    assert len(graded) == 3
    for result in graded:
        for name, metric in (result.metrics or {}).items():
            assert metric.status.value == "ok" and metric.checks, (result.id, name)
            text = f"{metric.criteria} {metric.supporting_evidence}"
            assert text.startswith("O juiz respondeu") and not IDENTIFIER.search(text), text
            assert (metric.supporting_evidence or "").endswith(f"nota {metric.score} de 3."), text
            assert f"Score: {metric.score}" in (metric.raw_output or "")  # the rule's own line, every number
    report = tmp_path / "report.md"
    report.write_text(render_report(graded))
    assert [t.question for t in read_triples(report)] == [t.question for t in triples]
