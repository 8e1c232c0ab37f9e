"""Several annotators: one label each per item (their latest), consensus rules, and their agreement with one another
against figures worked out by hand."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from juiz.agreement.annotations import attach, item_annotations, latest_by_annotator
from juiz.agreement.annotators import format_inter_annotator, inter_annotator
from juiz.agreement.consensus import apply_consensus
from juiz.runtime.errors import InputError
from schemas.annotation import Annotation, AnnotationRecord, ConsensusRule
from schemas.judgement import Judgement, JudgementStatus
from schemas.labels import LabelMapping
from tests.unit.test_agreement import PROVENANCE

MAPPING = LabelMapping()


def at(hour: int) -> datetime:
    return datetime(2026, 11, 27, hour, tzinfo=UTC)


def item(n: int, *labels: tuple[str, str], manual: str | None = None, **extra: object) -> Judgement:
    return Judgement(
        id=f"t{n}",
        status=JudgementStatus.OK,
        score=3,
        normalized_score=1.0,
        provenance=PROVENANCE,
        question=f"q{n}?",
        answer=f"a{n}.",
        manual_label=manual,
        annotations=[Annotation(annotator=who, label=label) for who, label in labels] or None,
        **extra,
    )


def test_an_annotator_has_one_label_per_item_and_metric_their_latest() -> None:
    labels = [
        Annotation(annotator="alice", label="C", at=at(9)),
        Annotation(annotator="bob", label="I", at=at(10)),
        Annotation(annotator="alice", label="P", at=at(11)),  # alice changed her mind
        Annotation(annotator="alice", label="I", at=at(8)),  # older: does not count
        Annotation(annotator="bob", label="C", metric="groundedness"),
    ]
    latest = latest_by_annotator(labels, None)
    assert {name: a.label for name, a in latest.items()} == {"alice": "P", "bob": "I"}  # bob's I is not replaced
    assert {name: a.label for name, a in latest_by_annotator(labels, "groundedness").items()} == {"bob": "C"}


def test_an_older_result_s_manual_label_is_one_annotation_by_its_author() -> None:
    assert [(a.annotator, a.label) for a in item_annotations(item(0, manual="C", manual_label_by="alice"))] == [
        ("alice", "C")
    ]
    assert [(a.annotator, a.label) for a in item_annotations(item(1, manual="P"))] == [("manual", "P")]
    assert item_annotations(item(2)) == []


def test_majority_consensus_ties_are_left_out() -> None:
    items = [
        item(0, ("alice", "C"), ("bob", "correct"), ("carol", "I")),  # C twice (an alias is the same vote)
        item(1, ("alice", "C"), ("bob", "I")),  # a tie
        item(2, ("alice", "P")),  # one label: kept as given
        item(3),
    ]
    consensus = apply_consensus(items, MAPPING, ConsensusRule())
    assert [j.manual_label for j in consensus.judgements] == ["C", None, "P", None]
    assert (consensus.labelled, consensus.ties) == (2, 1)
    assert consensus.judgements[1].annotations == items[1].annotations  # the annotations stay beside it


def test_one_named_annotator_gives_the_label() -> None:
    items = [item(0, ("alice", "C"), ("bob", "I")), item(1, ("bob", "P"))]
    consensus = apply_consensus(items, MAPPING, ConsensusRule.parse("annotator:bob"))
    assert [j.manual_label for j in consensus.judgements] == ["I", "P"]
    alice = apply_consensus(items, MAPPING, ConsensusRule.parse("annotator:alice"))
    assert [j.manual_label for j in alice.judgements] == ["C", None]
    assert alice.rule.describe() == "annotator alice's label"


def test_rules_are_checked() -> None:
    with pytest.raises(ValueError, match="majority or annotator:NAME"):
        ConsensusRule.parse("loudest")
    with pytest.raises(ValidationError, match="unknown metric"):
        ConsensusRule(metric="fluency")
    with pytest.raises(ValidationError, match="names one annotator"):
        ConsensusRule(kind="annotator")
    with pytest.raises(InputError, match=r"item 't0', bob's label: unknown label 'maybe'"):
        apply_consensus([item(0, ("alice", "C"), ("bob", "maybe"))], MAPPING, ConsensusRule())


def test_alpha_and_kappa_among_annotators_match_hand_figures() -> None:
    # alice and bob on six items: they agree on four (C C I I, and P/P), differ on t4 (C vs P) and t5 (I vs P).
    alice = ["C", "C", "I", "I", "P", "I"]
    bob = ["C", "C", "I", "I", "C", "P"]
    items = [item(n, ("alice", a), ("bob", b)) for n, (a, b) in enumerate(zip(alice, bob, strict=True))]
    items.append(item(6, ("carol", "C")))  # carol labelled one item nobody else did
    report = inter_annotator(items, MAPPING, apply_consensus(items, MAPPING, ConsensusRule()))
    assert report.annotators == ["alice", "bob", "carol"]
    assert report.labels == {"alice": 6, "bob": 6, "carol": 1}
    assert (report.items, report.items_shared) == (7, 6)
    kappas = {(p.a, p.b): p for p in report.pairs}
    # alice × bob: observed agreement 24/36; expected (I 3·2 + P 1·1 + C 2·3)/36 = 13/36; kappa = 11/36 / (23/36).
    assert kappas["alice", "bob"].n == 6
    assert kappas["alice", "bob"].cohen_kappa.value == pytest.approx(11 / 23)
    assert kappas["alice", "carol"].cohen_kappa.value is None
    assert kappas["alice", "carol"].cohen_kappa.reason == "0 items labelled by both"
    # Nominal alpha over the six paired items (carol's lone label is not pairable): 12 values, I 5, P 2, C 5;
    # D_o = 4/12, D_e = (2·(5·2 + 5·5 + 2·5))/(12·11) = 90/132; alpha = 1 − D_o / D_e.
    assert report.krippendorff_alpha_nominal.value == pytest.approx(1 - (4 / 12) / (90 / 132))
    assert report.krippendorff_alpha_ordinal.value is not None
    assert report.consensus_items == 5 and report.ties == 2  # t4, t5 tie; t6 has carol's alone
    text = format_inter_annotator(report)
    assert "Cohen's kappa alice / bob on 6 items: 0.478" in text and "2 tied (left out)" in text


def test_alpha_is_null_with_a_reason_when_undefined() -> None:
    one = [item(0, ("alice", "C")), item(1, ("alice", "I"))]
    report = inter_annotator(one, MAPPING, apply_consensus(one, MAPPING, ConsensusRule()))
    assert report.krippendorff_alpha_ordinal.reason == "fewer than two annotators"
    same = [item(0, ("alice", "C"), ("bob", "C")), item(1, ("alice", "C"), ("bob", "C"))]
    report = inter_annotator(same, MAPPING, apply_consensus(same, MAPPING, ConsensusRule()))
    assert report.krippendorff_alpha_nominal.reason == "only one class present on the items labelled twice or more"


def test_a_labels_file_joins_the_items_by_triple_or_id() -> None:
    items = [item(0, ("alice", "C")), item(1)]
    records = [
        AnnotationRecord(triple=items[0].content_key(), annotator="bob", label="P", comment="partly off"),
        AnnotationRecord(id="t1", annotator="bob", label="I"),
        AnnotationRecord(id="t9", annotator="bob", label="I"),  # another triple of the labelled set
    ]
    joined, unmatched = attach(items, records)
    assert unmatched == 1
    assert [(a.annotator, a.label, a.comment) for a in joined[0].annotations or []] == [
        ("alice", "C", None),
        ("bob", "P", "partly off"),
    ]
    assert [(a.annotator, a.label) for a in joined[1].annotations or []] == [("bob", "I")]
    with pytest.raises(ValidationError, match="id or the triple's content key"):
        AnnotationRecord(annotator="bob", label="I")
    with pytest.raises(ValidationError, match="Extra inputs"):
        Annotation.model_validate({"annotator": "bob", "label": "I", "coment": "typo"})
