"""answer_relevance@checks-19: checks-17 with a veto counted from the words, not asked: an answer that only restates
the question (most of its content words the question's, and those repeated) is not an answer."""

from __future__ import annotations

from dataclasses import replace

import pytest

import prompts
from bench.regrade import same_conversations
from juiz.judging.check_rule import apply_rule
from juiz.judging.checks import CheckJob
from juiz.judging.explain import explain
from juiz.judging.word_overlap import COUNTERS, restates_question, with_counted
from schemas.judgement import CheckResult

QUESTION = "How do vaccines train the immune system?"
CIRCLES = "Vaccines train the immune system by training the immune system, so the immune system is trained by vaccines."
ANSWER = "They show it a harmless piece of the germ, so it makes antibodies and memory cells before a real infection."


@pytest.mark.parametrize(
    ("question", "answer", "restates"),
    [
        (QUESTION, CIRCLES, True),
        ("Por que o café tira o sono?", "O café tira o sono porque o café tira o sono, e o sono some com o café.",
         True),
        (QUESTION, ANSWER, False),
        # echoing the question once to state what it asks is an answer
        ("What is the capital of France?", "The capital of France is Paris.", False),
        ("Is the Amazon longer than the Nile?", "Yes, the Amazon is longer than the Nile.", False),
        # nothing to count
        ("Is it safe?", "Yes.", False),
    ],
)  # fmt: skip
def test_an_answer_restates_the_question_only_when_it_circles_the_questions_words(
    question: str, answer: str, restates: bool
) -> None:
    assert restates_question(question, answer) is restates


def _read(template: prompts.PromptTemplate, question: str, answer: str) -> list[CheckResult]:
    ok = {"mass": 0.99, "status": "ok", "p_yes": 0.9}
    rows = []
    for c in template.checks:
        if c.ask == "once":
            rows.append(CheckResult(name=c.name, question=c.question, role=c.role, **ok))
        elif c.ask == "per_sentence":
            rows.append(CheckResult(name=c.name, question=c.question, role=c.role, yes_means=c.yes_means, target=answer,
                                    **{**ok, "p_yes": 0.1}))  # fmt: skip
        elif c.ask == "per_point":
            for point in ("Vaccines show the immune system a harmless piece of a germ.", "It makes memory cells."):
                p_yes = 0.1 if c.yes_means == "bad" else 0.9
                rows.append(CheckResult(name=c.name, question=c.question, role=c.role, yes_means=c.yes_means,
                                        target=point, **{**ok, "p_yes": p_yes}))  # fmt: skip
    return with_counted(template, rows, question, answer)


@pytest.mark.parametrize("lang", ["en", "pt"])
def test_checks_19_is_checks_17s_conversations_and_asks_the_engine_nothing_more(lang: str) -> None:
    seventeen, nineteen = (prompts.load("answer_relevance", v, lang) for v in ("checks-17", "checks-19"))
    assert same_conversations(seventeen, nineteen) and nineteen.rule == seventeen.rule
    fields = {
        "question": QUESTION,
        "context": "[1] Vaccines show the body a harmless piece of a germ.",
        "answer": ANSWER,
    }
    asked = [
        (a.check.name, a.target) for a in CheckJob.plan(0, "answer_relevance", nineteen, fields).asks("- A point")[0]
    ]
    assert asked == [
        (a.check.name, a.target) for a in CheckJob.plan(0, "answer_relevance", seventeen, fields).asks("- A point")[0]
    ]
    assert all(name != "adds_to_question" for name, _ in asked)


def test_the_restatement_veto_sinks_an_answer_that_circles_the_question_and_only_that() -> None:
    nineteen = prompts.load("answer_relevance", "checks-19", "en")
    circles = apply_rule(nineteen, _read(nineteen, QUESTION, CIRCLES))
    answer = apply_rule(nineteen, _read(nineteen, QUESTION, ANSWER))
    assert circles.score == 0 and "vetoed: adds_to_question 0.00 < 0.50" in circles.supporting_evidence
    assert answer.score == 3
    [counted] = [r for r in _read(nineteen, QUESTION, ANSWER) if r.name == "adds_to_question"]
    assert counted.p_yes == 1.0 and counted.mass == 1.0


def test_only_a_known_check_can_be_counted() -> None:
    assert set(prompts.COUNTED_CHECKS) == set(COUNTERS)  # the prompt schema names what the judge can count
    nineteen = prompts.load("answer_relevance", "checks-19", "en")
    assert nineteen.rule is not None
    unknown = replace(next(c for c in nineteen.checks if c.ask == "counted"), name="sounds_right")
    with pytest.raises(prompts.PromptSchemaError, match="only adds_to_question can be counted"):
        prompts._linked((*nineteen.checks, unknown), nineteen.rule, "x")


@pytest.mark.parametrize(
    ("lang", "question", "answer", "said"),
    [
        ("en", QUESTION, CIRCLES, "counted from its words, the answer only restates the question"),
        ("pt", "Por que o café tira o sono?", "O café tira o sono porque o café tira o sono, e o sono some com o café.",
         "contado nas palavras, a resposta só repete a pergunta"),
    ],
)  # fmt: skip
def test_the_explanation_says_the_restatement_was_counted_not_judged(
    lang: str, question: str, answer: str, said: str
) -> None:
    nineteen = prompts.load("answer_relevance", "checks-19", lang)
    results = _read(nineteen, question, answer)
    told = explain(nineteen, results, apply_rule(nineteen, results))
    assert said in told.supporting_evidence and "adds_to_question" not in told.supporting_evidence
    assert ("not asked" if lang == "en" else "não perguntado") in told.criteria
