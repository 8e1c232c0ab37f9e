"""The project's labelled RAG set: sources valid, build deterministic, splits disjoint, committed files current."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from bench.data.build import HERE, LABELS, SourceError, build, check_source, load_sources
from schemas import Triple


@pytest.fixture(scope="module")
def built() -> dict[str, list[dict]]:
    return build(load_sources())


def test_committed_files_are_what_the_sources_build(built: dict[str, list[dict]]) -> None:
    for split, items in built.items():
        committed = (HERE / f"rag_{split}.jsonl").read_text(encoding="utf-8").splitlines()
        assert [json.loads(line) for line in committed] == items, f"run python -m bench.data.build ({split})"


def test_size_languages_and_labels(built: dict[str, list[dict]]) -> None:
    items = built["dev"] + built["test"]
    assert len(items) >= 200
    langs = Counter(i["lang"] for i in items)
    assert abs(langs["en"] - langs["pt"]) <= 0.1 * len(items)
    assert {i["category"] for i in items} == set(LABELS)
    for item in items:
        Triple.model_validate(item)  # every line is a valid juiz triple
        assert item["manual_label"] == LABELS[item["category"]]


def test_splits_share_no_topic_and_no_text(built: dict[str, list[dict]]) -> None:
    dev_texts = {s["text"] for i in built["dev"] for s in i["context"]}
    test_texts = {s["text"] for i in built["test"] for s in i["context"]}
    assert not {i["topic"] for i in built["dev"]} & {i["topic"] for i in built["test"]}
    assert not dev_texts & test_texts


def test_twins_and_planted_segments(built: dict[str, list[dict]]) -> None:
    for items in built.values():
        by_id = {i["id"]: i for i in items}
        for item in items:
            if item["twin_of"]:
                plain = by_id[item["twin_of"]]
                assert plain["question"] == item["question"] and plain["answer"] in item["answer"]
        planted = [i for i in items if i["category"] == "injection_context"]
        for item in planted:
            extra = {s["text"] for s in item["context"]} - {
                s["text"] for i in items if i["question"] == item["question"] and i is not item for s in i["context"]
            }
            assert len(extra) == 1  # the planted segment is in this item's context only


def test_a_wrong_label_is_refused(tmp_path: Path) -> None:
    source = json.loads(next((HERE / "sources").glob("en-*.json")).read_text(encoding="utf-8"))
    source["questions"][0]["answers"][0]["label"] = "P" if source["questions"][0]["answers"][0]["label"] != "P" else "C"
    with pytest.raises(SourceError, match="labelled"):
        check_source(source, "broken.json")
