"""Named labelled sets without Redis: what a set keeps of a graded item, a JSONL line read back as its triple, and
what is refused with the field named."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from juiz.runtime.errors import InputError
from schemas import Judgement
from schemas.labelsets import LabelledItem, LabelledSetCreate
from schemas.triple import content_key
from service.labelsets import _checked_items, triple_of
from tests.unit.test_agreement import PROVENANCE

QUESTION, ANSWER, CONTEXT = "What is topic 1? [item-1]", "Topic one.", "Transcript about topic 1."


def judgement(**extra: object) -> Judgement:
    return Judgement.model_validate(
        {
            "id": "t1",
            "status": "ok",
            "score": 2,
            "provenance": PROVENANCE,
            "question": QUESTION,
            "answer": ANSWER,
            "context": CONTEXT,
            **extra,
        }
    )


def test_a_graded_item_is_kept_as_its_upload_gave_it() -> None:
    labelled = judgement(
        course="db", manual_label="I", uploaded_label="P", manual_label_by="alice", manual_label_at="2026-11-28T10:00Z"
    )
    triple = triple_of(labelled)
    assert (triple.id, triple.question, triple.answer, triple.context) == ("t1", QUESTION, ANSWER, CONTEXT)
    assert triple.manual_label == "P"  # the upload's label, not the annotators' consensus
    assert triple.model_extra == {"course": "db"}  # juiz's own fields dropped, the uploader's kept
    assert triple_of(judgement(manual_label="C")).manual_label == "C"  # nobody labelled it: the upload's label
    assert triple.content_key() == labelled.content_key()


def test_a_line_is_its_triple_and_its_labels() -> None:
    key = content_key(QUESTION, ANSWER, CONTEXT)
    line = LabelledItem.model_validate(
        {
            "id": "t1",
            "question": QUESTION,
            "answer": ANSWER,
            "context": CONTEXT,
            "split": "dev",
            "triple": key,
            "annotations": [{"annotator": "alice", "label": "C"}],
        }
    )
    ((checked_key, triple, annotations),) = _checked_items([line])
    assert checked_key == key and triple.model_extra == {"split": "dev"}
    assert [a.annotator for a in annotations] == ["alice"]


def test_a_key_that_is_not_the_lines_triple_is_refused_naming_it() -> None:
    wrong = LabelledItem(question=QUESTION, answer="Another answer.", triple=content_key(QUESTION, ANSWER, CONTEXT))
    with pytest.raises(InputError) as refused:
        _checked_items([LabelledItem(question=QUESTION, answer=ANSWER), wrong])
    assert (refused.value.field, refused.value.line) == ("triple", 1)


@pytest.mark.parametrize("name", ["", "has space", "-dash-first", "x" * 101, "slash/no", 'quote"no'])
def test_a_name_outside_the_pattern_is_refused(name: str) -> None:
    with pytest.raises(ValidationError) as refused:
        LabelledSetCreate(name=name)
    assert refused.value.errors()[0]["loc"] == ("name",)
