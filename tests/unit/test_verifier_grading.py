"""options.verifier: groundedness read again by a probe on the judge model's states (a FAKE engine and a FAKE state
reader: P(Yes) made up from the claim, no model)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from pydantic import ValidationError

import prompts
from juiz.engines.base import Conversation
from juiz.engines.fake import FakeEngine
from juiz.judging.judge import Judge
from juiz.judging.plan import plan_item
from juiz.judging.probe import PROMPT_HASH, States
from juiz.judging.result_cache import cache_key
from juiz.runtime.errors import ModelError, PromptError
from schemas import BatchOptions, Triple, VerifierSpec
from schemas.judgement import MetricStatus
from schemas.verifier import probe_version

MODEL = "fake-judge"
UNSUPPORTED = "the moon is made of cheese"


def _spec(model: str = MODEL, cut: float = 0.05) -> VerifierSpec:
    """A probe that reads P(Yes) alone, unscaled: its P(supported) is the reader's P(Yes)."""
    weights, bias = [1.0], 0.0
    return VerifierSpec(
        version=probe_version(model, None, PROMPT_HASH, weights, bias),
        model=model,
        prompt_hash=PROMPT_HASH,
        layer=None,
        with_p_yes=True,
        mean=[0.0],
        scale=[1.0],
        weights=weights,
        bias=bias,
        cut=cut,
    )


class FakeReader:
    """A FAKE state reader: P(Yes) 0.01 for the claim UNSUPPORTED, 0.99 for any other; no hidden state."""

    def __init__(self, fails: Exception | None = None) -> None:
        self.fails = fails
        self.read_claims: list[str] = []

    def read(self, passages: Sequence[str], claims: Sequence[str]) -> States:
        if self.fails is not None:
            raise self.fails
        self.read_claims += claims
        p_yes = np.array([0.01 if UNSUPPORTED in c.lower() else 0.99 for c in claims], dtype=np.float32)
        return States((), np.zeros((len(claims), 0, 1), dtype=np.float32), p_yes)


def _yes(conversation: Conversation) -> str:
    """Every check yes (high), every reference one point."""
    return "p=0.99" if prompts.asks_yes_no(conversation[-1]["content"]) else "The sky is blue."


def _judge(reader: FakeReader, model: str = MODEL) -> Judge:
    judge = Judge(FakeEngine(_yes, model_id=model))
    judge._readers[(MODEL, None)] = reader  # type: ignore[assignment]
    return judge


def _triple(answer: str) -> Triple:
    return Triple(
        id="a",
        question="Why is the sky blue?",
        answer=answer,
        context=[{"text": "Air scatters blue light more than red light."}, {"text": "The sky looks blue by day."}],
    )


OPTIONS = BatchOptions(metrics=["answer_relevance", "groundedness"], lang="en", verifier=_spec())


def test_an_answer_with_a_sentence_the_verifier_finds_unsupported_gets_groundedness_1_and_the_verdict_i() -> None:
    reader = FakeReader()
    plain = Judge(FakeEngine(_yes, model_id=MODEL)).grade([_triple(f"Air scatters blue. {UNSUPPORTED}.")], None)
    (result,) = _judge(reader).grade([_triple(f"Air scatters blue light. Also, {UNSUPPORTED}.")], OPTIONS)
    grounded = result.metrics["groundedness"]  # type: ignore[index]
    assert grounded.status is MetricStatus.OK
    assert grounded.score == 1
    assert grounded.verifier is not None and grounded.verifier.capped
    assert grounded.verifier.sentences == pytest.approx([0.99, 0.01], abs=1e-3)
    assert grounded.verifier.p_supported == pytest.approx(0.01, abs=1e-3)
    assert f"“Also, {UNSUPPORTED}.”" in (grounded.supporting_evidence or "")
    assert (grounded.supporting_evidence or "").endswith("the score goes from 3 to 1.")
    assert grounded.provenance is not None and grounded.provenance.verifier is not None
    assert grounded.provenance.verifier.version == OPTIONS.verifier.version  # type: ignore[union-attr]
    assert result.label_source == "verdict" and result.automated_label == "I"
    assert reader.read_claims == ["Air scatters blue light.", f"Also, {UNSUPPORTED}."]
    assert plain[0].metrics["answer_relevance"].verifier is None  # type: ignore[index]


def test_an_answer_the_verifier_finds_supported_keeps_the_judges_grade() -> None:
    (result,) = _judge(FakeReader()).grade([_triple("Air scatters blue light more than red.")], OPTIONS)
    (unverified,) = Judge(FakeEngine(_yes, model_id=MODEL)).grade(
        [_triple("Air scatters blue light more than red.")], OPTIONS.model_copy(update={"verifier": None})
    )
    grounded = result.metrics["groundedness"]  # type: ignore[index]
    assert grounded.verifier is not None and not grounded.verifier.capped
    assert grounded.score == unverified.metrics["groundedness"].score  # type: ignore[index]
    assert result.automated_label == unverified.automated_label


@pytest.mark.parametrize(
    "error", [RuntimeError("out of memory"), ModelError("qwen2.5-coder-1.5b-instruct was never pulled")]
)
def test_a_verifier_that_cannot_read_fails_the_metric_with_its_reason(error: Exception) -> None:
    (result,) = _judge(FakeReader(fails=error)).grade([_triple("Air scatters blue light.")], OPTIONS)
    grounded = result.metrics["groundedness"]  # type: ignore[index]
    assert grounded.status is MetricStatus.FAILED and grounded.score is None
    assert "verifier" in (grounded.error or "") and str(error) in (grounded.error or "")
    assert result.automated_label is None  # no verdict made up from the judge's unverified grade


def test_a_verifier_for_another_model_is_refused_before_any_engine_work() -> None:
    engine = FakeEngine(_yes, model_id="another-model")
    refused = r"verifier probe-\w+ reads the states of fake-judge; this judge is another-model"
    with pytest.raises(PromptError, match=refused):
        Judge(engine).grade([_triple("Air scatters blue light.")], OPTIONS)
    assert engine.calls == []


def test_the_verifier_needs_groundedness_and_an_intact_probe() -> None:
    with pytest.raises(ValidationError, match="verifier reads groundedness"):
        BatchOptions(metrics=["answer_relevance"], verifier=_spec())
    altered = _spec().model_dump() | {"bias": 1.0}
    with pytest.raises(ValidationError, match="altered"):
        VerifierSpec.model_validate(altered)


def test_the_result_cache_keys_on_the_verifier() -> None:
    engine = FakeEngine(_yes, model_id=MODEL)
    triple = _triple("Air scatters blue light.")
    without = OPTIONS.model_copy(update={"verifier": None})
    stricter = OPTIONS.model_copy(update={"verifier": _spec(cut=0.2)})
    keys = {
        cache_key(triple, options, plan_item(options, triple.question, engine), None)
        for options in (OPTIONS, without, stricter)
    }
    assert len(keys) == 3


def test_the_cap_is_told_in_the_items_language() -> None:
    options = OPTIONS.model_copy(update={"lang": "pt"})
    (result,) = _judge(FakeReader()).grade([_triple(f"O ar espalha a luz azul. E {UNSUPPORTED}.")], options)
    told = result.metrics["groundedness"].supporting_evidence or ""  # type: ignore[index]
    assert f"a frase “E {UNSUPPORTED}.”" in told and told.endswith("a nota passa de 3 para 1.")


def test_the_verifiers_reading_is_one_conversation_more_per_item_in_the_progress() -> None:
    from juiz.judging.progress import Progress

    triples = [_triple("Air scatters blue light."), _triple(f"Also, {UNSUPPORTED}.").model_copy(update={"id": "b"})]
    plain, verifying = Progress(2), Progress(2)
    Judge(FakeEngine(_yes, model_id=MODEL)).grade(triples, OPTIONS.model_copy(update={"verifier": None}), plain)
    _judge(FakeReader()).grade(triples, OPTIONS, verifying)
    before, after = plain.snapshot(), verifying.snapshot()
    assert after.conversations_planned == before.conversations_planned + 2
    assert after.conversations_done == after.conversations_planned and after.items_done == 2
    assert after.work_planned > before.work_planned and after.work_done == after.work_planned
