"""The research benches that read kept gradings: the probe's rescoring and the cloze probe's reading of fills."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from bench.cloze import Blank, blanks, disagrees
from bench.labelled import CELLS
from bench.probe import rescored
from bench.regrade import regraded
from schemas import Judgement, Triple

KEPT = Path(__file__).resolve().parents[2] / "bench" / "results" / "judgements" / "test_checks-14.jsonl.gz"


def test_the_probe_rescores_kept_gradings_as_regrade_does_with_the_answers_words() -> None:
    with gzip.open(KEPT, "rt") as kept:
        recorded = [json.loads(line) for _, line in zip(range(12), kept, strict=False)]
    for row, again in zip(recorded, rescored(recorded, "checks-17"), strict=True):
        expected = regraded(Judgement.model_validate(row), CELLS["checks-17"]).metrics or {}
        for name in ("answer_relevance", "groundedness"):
            assert again["metrics"][name]["score"] == expected[name].score
        covers = [c for c in again["metrics"]["answer_relevance"]["checks"] if c["name"] == "covers"]
        assert covers and all(c["words"] is not None for c in covers)


def _triple(answer: str) -> Triple:
    context = [{"text": "The kidneys filter about 180 litres a day at a GFR of 125 mL per minute."}]
    return Triple.model_validate({"question": "How much do the kidneys filter?", "answer": answer, "context": context})


def test_each_number_of_each_sentence_is_blanked_in_turn() -> None:
    found = blanks(_triple("About 18 litres a day. The GFR is 125 mL per minute."))
    assert [(b.number, b.blanked) for b in found] == [
        ("18", "About ____ litres a day."),
        ("125", "The GFR is ____ mL per minute."),
    ]


def test_a_fill_disagrees_only_with_another_number_of_the_context() -> None:
    triple = _triple("About 18 litres a day.")
    [blank] = blanks(triple)
    assert disagrees(triple, blank, "180", original_absent=True)
    assert not disagrees(triple, blank, "18", original_absent=True)  # the answer's own number
    assert not disagrees(triple, blank, "NONE", original_absent=True)  # no number
    assert not disagrees(triple, blank, "200", original_absent=True)  # a number the context does not give
    stated = Blank(triple.id, "", "125", "a GFR of ____ mL")
    assert disagrees(triple, stated, "180", original_absent=False)
    assert not disagrees(triple, stated, "180", original_absent=True)  # the answer's number is in the context
