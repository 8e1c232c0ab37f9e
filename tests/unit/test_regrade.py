"""bench.regrade says whether a cell's labels agree better than the baseline's as `juiz compare` does: paired
differences on the same items and McNemar's test."""

from __future__ import annotations

from bench.regrade import paired
from schemas.judgement import Judgement, MetricResult, MetricStatus, Provenance

PROVENANCE = Provenance(prompt="answer_relevance@checks-19.en", prompt_sha256="0" * 64, model="fake", sampling={},
                        juiz_version="0")  # fmt: skip


def labelled(index: int, label: str, relevance: int, groundedness: int) -> Judgement:
    metrics = {
        name: MetricResult(status=MetricStatus.OK, score=score, normalized_score=score / 3)
        for name, score in (("answer_relevance", relevance), ("groundedness", groundedness))
    }
    return Judgement(id=f"i{index}", question="q?", answer="a.", status="ok", metrics=metrics, provenance=PROVENANCE,
                     manual_label=label)  # fmt: skip


LABELS = ["C", "P", "I"] * 6


def test_the_same_labels_differ_by_nothing_and_mcnemar_finds_no_discordant_item() -> None:
    before = [labelled(i, label, 3, 3) for i, label in enumerate(LABELS)]
    compared = paired(before, before, resamples=50)
    assert compared["accuracy"]["difference"] == 0.0
    assert compared["mcnemar"] == {"only_baseline_right": 0, "only_cell_right": 0, "p_value": 1.0}


def test_a_cell_that_labels_every_item_right_is_better_on_every_statistic() -> None:
    right = {"C": (3, 3), "P": (2, 2), "I": (0, 0)}
    before = [labelled(i, label, 3, 3) for i, label in enumerate(LABELS)]
    after = [labelled(i, label, *right[label]) for i, label in enumerate(LABELS)]
    compared = paired(before, after, resamples=50)
    assert compared["accuracy"] == {"a": 0.333, "b": 1.0, "difference": 0.667, "ci95": compared["accuracy"]["ci95"]}
    low, _ = compared["accuracy"]["ci95"]  # type: ignore[misc]
    assert low > 0
    assert compared["mcnemar"]["only_cell_right"] == 12 and compared["mcnemar"]["only_baseline_right"] == 0
    assert compared["mcnemar"]["p_value"] < 0.01
