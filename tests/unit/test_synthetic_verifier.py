"""Synthetic claims from a corpus and the verifier trained on them."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from juiz.cli import main
from juiz.judging.synthetic import (
    CONTRADICTED,
    NOT_STATED,
    SUPPORTED,
    Example,
    Passage,
    build_examples,
    flip_negation,
    swap_number,
    swap_opposite,
)
from juiz.judging.verifier import Verifier, train

CORPUS = [
    Passage("The kidneys filter about 180 litres of plasma a day. Almost all of it is reabsorbed in the tubules.", "a"),
    Passage("Water follows sodium, and the loop of Henle builds a gradient that ADH uses later.", "a"),
    Passage("Gutenberg combined movable metal type, oil-based ink and a screw press adapted from wine making.", "b"),
    Passage("Printing spread to more than 200 cities by 1500, and Venice was the largest centre.", "b"),
    Passage("Os juros compostos incidem sobre o saldo acumulado, e por isso crescem mais depressa.", "c"),
    Passage("A inflação de 4% ao ano reduz o rendimento real de uma aplicação de 10% para cerca de 5,8%.", "c"),
]


def test_examples_are_deterministic_and_of_every_kind() -> None:
    first = build_examples(CORPUS, seed=3)
    assert first == build_examples(CORPUS, seed=3)
    assert first != build_examples(CORPUS, seed=4)
    hows = {(e.label, e.how) for e in first}
    assert {(SUPPORTED, "verbatim"), (NOT_STATED, "other_document"), (CONTRADICTED, "number_swap")} <= hows
    assert {(CONTRADICTED, "negation"), (CONTRADICTED, "opposite")} <= hows
    for example in first:
        assert example.passages[0] in {p.text for p in CORPUS}
        if example.label == CONTRADICTED:
            assert example.claim not in example.passages[0]
        if example.how == "other_document":
            assert example.claim not in " ".join(p.text for p in CORPUS if p.document == example.document)


def test_one_document_is_not_a_corpus() -> None:
    with pytest.raises(ValueError, match="two documents"):
        build_examples([p for p in CORPUS if p.document == "a"])


def test_changes_change_exactly_one_fact() -> None:
    rng = random.Random(0)
    assert swap_number("It filters 180 litres a day.", ["180", "125"], rng) == "It filters 125 litres a day."
    assert flip_negation("Water is reabsorbed in the tubules.", "en") == "Water is not reabsorbed in the tubules."
    assert flip_negation("Water is not reabsorbed.", "en") == "Water is reabsorbed."
    assert flip_negation("O saldo é acumulado.", "pt") == "O saldo não é acumulado."
    assert swap_opposite("Prices rise before wages.", "en") == "Prices rise after wages."
    assert swap_opposite("Mais juros.", "pt") == "Menos juros."


def test_the_verifier_separates_changed_facts_and_round_trips(tmp_path: Path) -> None:
    examples = build_examples(CORPUS * 1, seed=0)
    verifier = train(examples)
    passage = [CORPUS[0].text]
    kept = verifier.p_supported("The kidneys filter about 180 litres of plasma a day.", passage)
    changed = verifier.p_supported("The kidneys filter about 125 litres of plasma a day.", passage)
    assert kept > 0.5 > changed
    path = tmp_path / "verifier.json"
    verifier.save(path)
    again = Verifier.load(path)
    assert again.version == verifier.version
    assert again.answer_support("Almost all of it is not reabsorbed in the tubules.", passage) < 0.5
    assert again.answer_support("", passage) is None


def test_a_verifier_of_other_features_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "verifier.json"
    path.write_text(json.dumps({"format": "juiz-verifier/1", "features": ["x"], "weights": [1], "bias": 0}))
    with pytest.raises(ValueError, match="features"):
        Verifier.load(path)


def test_synth_and_train_from_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    triples = tmp_path / "triples.jsonl"
    rows = [
        {"question": "q", "answer": "a", "context": [{"text": p.text, "source": p.document} for p in CORPUS[i : i + 2]]}
        for i in range(0, len(CORPUS), 2)
    ]
    triples.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    examples = tmp_path / "examples.jsonl"
    assert main(["synth", str(triples), "-o", str(examples)]) == 0
    made = [Example.from_json(json.loads(line)) for line in examples.read_text(encoding="utf-8").splitlines()]
    assert made == build_examples(CORPUS, seed=0)
    assert main(["train", str(examples), "-o", str(tmp_path / "v.json")]) == 0
    assert Verifier.load(tmp_path / "v.json").trained_on["examples"] == len(made)


def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["synth", str(tmp_path / "missing"), "-o", str(tmp_path / "x.jsonl")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"claim": "x"}\n')
    assert main(["train", str(bad), "-o", str(tmp_path / "v.json")]) == 2
    assert "needs a claim, a list of passages and a label" in capsys.readouterr().err
    folder = tmp_path / "docs"
    folder.mkdir()
    assert main(["synth", str(folder), "-o", str(tmp_path / "x.jsonl")]) == 2
    assert "no .txt or .md document" in capsys.readouterr().err
