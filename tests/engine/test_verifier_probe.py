"""The verifier end to end on the test model: `juiz synth` examples → a probe on the model's real hidden states
(transformers) → a grading with options.verifier on the engine `auto` picks. Asserts the plumbing, not accuracy: a
135M model's states are not a verifier anyone should use."""

from __future__ import annotations

from pathlib import Path

import pytest

from juiz.cli import main
from juiz.engines.base import JudgeEngine
from juiz.engines.models import TEST_MODEL
from juiz.judging.judge import Judge
from juiz.judging.probe import Probe
from schemas import BatchOptions, Triple

pytestmark = pytest.mark.engine

DOCUMENTS = {
    "tides.md": "The Moon's gravity pulls the ocean into a bulge on the side facing it. A second bulge forms on the "
    "far side. As the Earth turns, most coasts see two high tides every 24 hours and 50 minutes.",
    "coffee.md": "Caffeine blocks adenosine receptors in the brain. Its effect starts about 30 minutes after "
    "drinking and lasts four to six hours. Decaf still holds 2 to 15 milligrams of caffeine per cup.",
    "aqueducts.md": "Roman aqueducts ran on a gentle downward slope of less than one metre per kilometre. Gravity "
    "alone moved the water. Where a valley lay in the way, the channel crossed it on arches built in 19 BC.",
}


def test_a_probe_trained_on_the_models_states_reads_every_sentence_of_a_graded_answer(
    tmp_path: Path, tiny_judge_engine: JudgeEngine
) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, text in DOCUMENTS.items():
        (corpus / name).write_text(text, encoding="utf-8")
    examples, probe_file = tmp_path / "examples.jsonl", tmp_path / "probe.json"
    assert main(["synth", str(corpus), "-o", str(examples)]) == 0
    trained = main(["train", str(examples), "-o", str(probe_file), "--probe", "--model", TEST_MODEL, "--layer", "20"])
    assert trained == 0
    probe = Probe.load(probe_file)
    assert probe.model == TEST_MODEL and probe.layer == 20 and probe.trained_on["examples"] > 0

    answer = "Most coasts see two high tides a day. The Sun's heat makes the sea boil twice a day."
    triple = Triple(
        id="tides",
        question="Why are there two high tides a day?",
        answer=answer,
        context=[{"text": DOCUMENTS["tides.md"]}],
    )
    options = BatchOptions(metrics=["answer_relevance", "groundedness"], lang="en", verifier=probe.spec())
    (result,) = Judge(tiny_judge_engine).grade([triple], options)
    grounded = result.metrics["groundedness"]  # type: ignore[index]
    assert grounded.provenance is not None and grounded.provenance.verifier is not None
    assert grounded.provenance.verifier.version == probe.version
    # A grade the tiny judge could not give (its replies neither yes nor no) has nothing to verify.
    if grounded.status.value == "ok":
        reading = grounded.verifier
        assert reading is not None and len(reading.sentences) == 2
        assert reading.p_supported == min(reading.sentences)
        if reading.capped:
            assert grounded.score == 1 and reading.p_supported < probe.cut
