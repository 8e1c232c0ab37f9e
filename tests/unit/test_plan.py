"""One plan per item: the prompt and sampling of each metric, chosen once; the judge grades by it, the result cache
keys on it, and a failed result records it."""

from __future__ import annotations

from dataclasses import replace

import pytest

import prompts
from juiz.engines.fake import FakeEngine
from juiz.judging.checks import ASKING_VERSION, CHECK_REQUEST
from juiz.judging.judge import Judge
from juiz.judging.judgements import failed_judgement
from juiz.judging.plan import (
    MetricPlan,
    plan_item,
    plan_or_reason,
    provenance_by_metric,
    provenance_of,
    score_sampling,
    select_prompt,
)
from juiz.judging.result_cache import cache_key
from schemas import BatchOptions, JudgementStatus, Triple
from schemas.judgement import MetricStatus

ALL = ["answer_relevance", "groundedness", "context_relevance"]
ITEM = Triple(question="Qual é a capital de Portugal?", answer="Lisboa.", context="Lisboa é a capital de Portugal.")
ENGINE = FakeEngine(lambda _: "", model_id="m")


def checks_plan(template: prompts.PromptTemplate) -> MetricPlan:
    return MetricPlan(
        template, CHECK_REQUEST, provenance_of(ENGINE, "answer_relevance", template, CHECK_REQUEST, "cot")
    )


def test_a_plan_is_what_select_prompt_chooses_with_the_sampling_its_kind_asks_metric_by_metric() -> None:
    for options in (
        BatchOptions(metrics=ALL),
        BatchOptions(metrics=ALL, prompt="answer_relevance@juiz-1.en", mode="fast"),
        BatchOptions(metrics=["answer_relevance"], prompt="answer_relevance@trulens-1", samples=3, temperature=0.7),
    ):
        plan = plan_item(options, ITEM.question, ENGINE)
        assert list(plan) == options.metrics  # in the batch's order: the cache key depends on it
        for metric, chosen in plan.items():
            assert chosen.template == select_prompt(options, ITEM.question, metric)
            checks = chosen.template.kind == "checks"
            assert chosen.request == (CHECK_REQUEST if checks else score_sampling(options, metric))
            assert chosen.provenance == provenance_of(
                ENGINE, metric, chosen.template, chosen.request, options.mode, context_chars=options.context_chars
            )


def test_the_item_language_is_read_for_every_metric_and_a_pinned_one_wins() -> None:
    plan = plan_item(BatchOptions(metrics=ALL, prompt="answer_relevance@juiz-1.en"), ITEM.question, ENGINE)
    assert {m: p.template.lang for m, p in plan.items()} == {
        "answer_relevance": "en",
        "groundedness": "pt",
        "context_relevance": "pt",
    }


def test_the_judge_grades_by_the_plan_it_is_given() -> None:
    """A worker plans once for its cache keys; the judge must not choose again (and differently)."""
    options = BatchOptions(metrics=["answer_relevance"], prompt="answer_relevance@juiz-1")
    given = {"answer_relevance": checks_plan(prompts.load("answer_relevance", "juiz-2", "en"))}
    engine = FakeEngine(lambda c: "Criteria: c\nSupporting Evidence: e\nScore: 2")
    planned, own = Judge(engine).grade_many([(ITEM, options), (ITEM, options)], plans=[given, None])
    assert planned.provenance.prompt == "answer_relevance@juiz-2.en"
    assert own.provenance.prompt == "answer_relevance@juiz-1.pt"


def test_the_cache_key_follows_the_plan() -> None:
    options = BatchOptions(metrics=["answer_relevance"])
    plan = plan_item(options, ITEM.question, ENGINE)
    other = {"answer_relevance": checks_plan(prompts.load("answer_relevance", "juiz-1", "pt"))}
    assert cache_key(ITEM, options, plan, "t") == cache_key(
        ITEM, options, plan_item(options, ITEM.question, ENGINE), "t"
    )
    assert cache_key(ITEM, options, plan, "t") != cache_key(ITEM, options, other, "t")
    assert cache_key(ITEM, options, plan, "t") != cache_key(ITEM, options, plan, "other-tenant")
    # juiz's own version is recorded, not keyed: a release that changes a prompt changes its file's hash.
    released = {
        m: replace(p, provenance=p.provenance.model_copy(update={"juiz_version": "9.9"})) for m, p in plan.items()
    }
    assert cache_key(ITEM, options, released, "t") == cache_key(ITEM, options, plan, "t")


def test_the_cache_key_covers_the_engine_that_grades_not_only_its_model() -> None:
    """The same model in bfloat16 and in float32 grades differently (a check's P(yes) by up to ~0.02): a bf16 worker
    must not reuse a float32 worker's grade, nor an in-process engine a judge server's, nor llama.cpp on Q4 weights
    vLLM's (or another quantisation's)."""
    options = BatchOptions(metrics=ALL)
    engines = [
        ENGINE,
        FakeEngine(lambda _: "", "m", {"engine_dtype": "float32"}),
        FakeEngine(lambda _: "", "m", {"engine_dtype": "bfloat16"}),
        FakeEngine(lambda _: "", "m", {"engine": "openai", "engine_host": "judge.example"}),
        FakeEngine(lambda _: "", "m", {"engine": "openai", "engine_host": "other.example"}),
        FakeEngine(lambda _: "", "m", {"engine": "llamacpp", "engine_quantisation": "Q4_K_M"}),
        FakeEngine(lambda _: "", "m", {"engine": "llamacpp", "engine_quantisation": "Q8_0"}),
    ]
    keys = [cache_key(ITEM, options, plan_item(options, ITEM.question, e), "t") for e in engines]
    assert len(set(keys)) == len(engines)


def test_the_cache_key_covers_how_the_checks_are_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A change to the sentence splitter (or the passages, or the points) changes what a check-based prompt's checks
    see with the same prompt file: a grade asked the old way must not answer for one asked the new way."""
    options = BatchOptions(metrics=ALL)
    plan = plan_item(options, ITEM.question, ENGINE)
    assert plan["answer_relevance"].provenance.sampling["asking"] == ASKING_VERSION
    before = cache_key(ITEM, options, plan, "t")
    monkeypatch.setattr("juiz.judging.plan.ASKING_VERSION", ASKING_VERSION + 1)
    after = cache_key(ITEM, options, plan_item(options, ITEM.question, ENGINE), "t")
    assert before != after
    cot = BatchOptions(metrics=["answer_relevance"], prompt="answer_relevance@juiz-2", mode="cot")
    assert "asking" not in plan_item(cot, ITEM.question, ENGINE)["answer_relevance"].provenance.sampling


def test_a_failed_result_records_the_plan_and_survives_a_prompt_that_is_gone() -> None:
    """A prompt version removed between intake and grading fails the item with the reason; it used to raise
    PromptError from inside the worker's own failure path."""
    options = BatchOptions(metrics=["answer_relevance", "groundedness"], prompt="answer_relevance@nope-9")
    result = failed_judgement(ITEM, options, "engine gone", provenance_by_metric(options, ITEM.question, ENGINE))
    assert result.status is JudgementStatus.FAILED and result.error == "engine gone"
    assert result.provenance.prompt == "answer_relevance" and result.provenance.prompt_sha256 == ""
    assert result.metrics is not None and result.metrics["groundedness"].provenance is not None
    assert result.metrics["groundedness"].provenance.prompt.startswith("groundedness@")
    plan = plan_item(BatchOptions(), ITEM.question, ENGINE)
    planned = failed_judgement(
        ITEM, BatchOptions(), "r", plan_or_reason(BatchOptions(), ITEM.question, ENGINE).provenance
    )
    assert planned.provenance == plan["answer_relevance"].provenance


def test_every_result_records_the_engine_it_was_planned_for_graded_or_failed() -> None:
    """The engine's origin (here vLLM's dtype) is part of the plan's provenance: a graded result and a failed one record
    it alike, and a result graded in float32 never reads as one graded in bfloat16."""
    bf16 = FakeEngine(lambda c: "Criteria: c\nSupporting Evidence: e\nScore: 2", "m", {"engine_dtype": "bfloat16"})
    options = BatchOptions(metrics=ALL, prompt="answer_relevance@juiz-1")
    (graded,) = Judge(bf16).grade([ITEM], options)
    assert graded.metrics is not None
    # Groundedness' default prompt is check-based: this reply is no yes/no, so only answer relevance is graded.
    assert graded.metrics["answer_relevance"].status is MetricStatus.OK and graded.provenance.engine_dtype == "bfloat16"
    assert {m.provenance.engine_dtype for m in graded.metrics.values() if m.provenance} == {"bfloat16"}
    failed = failed_judgement(ITEM, options, "engine gone", provenance_by_metric(options, ITEM.question, bf16))
    assert failed.provenance.engine_dtype == "bfloat16"
    assert plan_item(options, ITEM.question, ENGINE)["groundedness"].provenance.engine_dtype is None
