"""groundedness@checks-9: checks-8 and a veto asked of each sentence beside the item's whole context, its weakest
sentence deciding (a per-sentence check's own `aggregate`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

import prompts
from juiz.judging.check_rule import apply_rule
from juiz.judging.checks import CheckJob
from schemas.judgement import CheckResult

CONTEXT = "[1] The kidneys filter about 180 litres a day.\n\n[2] Almost all of it is reabsorbed."
FIELDS = {"question": "How much do the kidneys filter?", "context": CONTEXT,
          "answer": "They filter about 18 litres a day. Most of it is reabsorbed."}  # fmt: skip


def _results(template: prompts.PromptTemplate, stated: dict[str, float], passage: float = 0.9) -> list[CheckResult]:
    ok = {"mass": 0.99, "status": "ok"}
    rows = [CheckResult(name=c.name, question=c.question, role=c.role, p_yes=0.9, **ok)
            for c in template.checks if c.ask == "once"]  # fmt: skip
    rows += [CheckResult(name="sentence_in_passage", question="Q?", role="core", target=s, p_yes=passage, **ok)
             for s in stated]  # fmt: skip
    rows += [CheckResult(name="stated_by_context", question="Q?", role="veto", target=s, p_yes=p, **ok)
             for s, p in stated.items()]  # fmt: skip
    return rows


@pytest.mark.parametrize("lang", ["en", "pt"])
def test_checks_9_asks_checks_8s_conversations_and_each_sentence_beside_the_whole_context(lang: str) -> None:
    eight, nine = prompts.load("groundedness", "checks-8", lang), prompts.load("groundedness", "checks-9", lang)
    assert [c.name for c in nine.checks] == [*(c.name for c in eight.checks), "stated_by_context"]
    for old, new in zip(eight.checks, nine.checks, strict=False):
        assert new == old
    assert nine.rule is not None and eight.rule is not None and nine.rule.cuts == eight.rule.cuts
    job = CheckJob.plan(0, "groundedness", nine, FIELDS, CONTEXT.split("\n\n"))
    whole = [a for a in job.asks(None)[0] if a.check.name == "stated_by_context"]
    assert [a.target for a in whole] == ["They filter about 18 litres a day.", "Most of it is reabsorbed."]
    for ask in whole:  # the whole context, then the question, then the one sentence: a shared prefix up to it
        text = ask.conversation[-1]["content"]
        assert CONTEXT in text and text.index(CONTEXT) < text.index(ask.check.question) < text.index(str(ask.target))


def test_one_sentence_the_whole_context_does_not_state_vetoes_the_answer() -> None:
    nine = prompts.load("groundedness", "checks-9", "en")
    assert nine.rule is not None and nine.rule.sentence_aggregate == "mean"
    supported = apply_rule(nine, _results(nine, {"a": 0.9, "b": 0.9}))
    # the mean of the two sentences (0.6) would clear the veto's cut; the weakest decides
    one_false = apply_rule(nine, _results(nine, {"a": 0.3, "b": 0.9}))
    assert supported.score == 3 and one_false.score == 0
    assert "vetoed: stated_by_context 0.30 < 0.38" in one_false.supporting_evidence


def test_an_aggregate_is_for_a_per_sentence_check_and_is_min_or_mean() -> None:
    nine = prompts.load("groundedness", "checks-9", "en")
    assert nine.rule is not None
    once = replace(nine.checks[0], aggregate="min")
    with pytest.raises(prompts.PromptSchemaError, match="aggregate is for a check asked per_sentence"):
        prompts._linked((once,), nine.rule, "x")
    whole = next(c for c in nine.checks if c.name == "stated_by_context")
    with pytest.raises(prompts.PromptSchemaError, match='aggregate must be "min" or "mean"'):
        prompts._linked((replace(whole, aggregate="max"),), nine.rule, "x")  # type: ignore[arg-type]


@pytest.mark.parametrize("lang", ["en", "pt"])
def test_checks_10_asks_the_veto_after_answer_relevances_own_item_text(lang: str) -> None:
    nine, ten = prompts.load("groundedness", "checks-9", lang), prompts.load("groundedness", "checks-10", lang)
    relevance = prompts.load("answer_relevance", "checks-17", lang)
    per_passage = [c for c in ten.checks if c.name == "sentence_in_passage"]
    assert per_passage == [c for c in nine.checks if c.name == "sentence_in_passage"]
    assert ten.rule is not None and nine.rule is not None and ten.rule.cuts == nine.rule.cuts
    assert ten.system == relevance.system and ten.user == relevance.user
    job = CheckJob.plan(0, "groundedness", ten, FIELDS, CONTEXT.split("\n\n"))
    whole = [a for a in job.asks(None)[0] if a.check.name == "stated_by_context"]
    assert [a.target for a in whole] == ["They filter about 18 litres a day.", "Most of it is reabsorbed."]
    item = relevance.render_check(relevance.checks[0], **FIELDS)
    shared = item[1]["content"][: item[1]["content"].index(relevance.checks[0].question)]
    for ask in whole:  # answer relevance's system message and item text, then the question, then the one sentence
        assert ask.check.shares_item_prefix and ask.prefix_key == job.prefix_key
        assert ask.conversation[0] == item[0] and ask.conversation[1]["content"].startswith(shared)
        assert (
            ask.conversation[1]["content"]
            .rstrip()
            .endswith(f"{ask.target}\n</{'sentence' if lang == 'en' else 'frase'}>")
        )
    assert job.prefix_key == CheckJob.plan(0, "answer_relevance", relevance, FIELDS).prefix_key
