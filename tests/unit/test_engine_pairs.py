"""bench.engine_pairs compares two gradings of the same items under the same cuts: identical gradings agree on every
item; an item moved across a cut changes class and is counted at the cut."""

from __future__ import annotations

import numpy as np
import pytest

from bench.engine_pairs import compare

CUTS = {"answer_relevance": (0.3, 0.5, 0.7), "groundedness": (0.3, 0.5, 0.7)}


def grading(strengths: list[float]) -> dict[str, object]:
    no_veto = np.zeros(len(strengths), dtype=bool)
    return {
        "y": np.array([2, 1, 0]),
        "answer_relevance": (np.array(strengths), no_veto),
        "groundedness": (np.array([0.9, 0.9, 0.9]), no_veto),
    }


def test_identical_gradings_agree_on_every_item() -> None:
    same = grading([0.9, 0.6, 0.1])
    report = compare(same, same, CUTS, near=0.05)
    assert report["verdict"]["classes_differ"] == 0
    assert report["metrics"]["answer_relevance"]["mean_abs_strength_delta"] == 0
    assert report["verdict"]["mcnemar_p"] == 1.0


def test_an_item_moved_across_a_cut_changes_class_and_is_counted_at_the_cut() -> None:
    report = compare(grading([0.72, 0.6, 0.1]), grading([0.68, 0.6, 0.1]), CUTS, near=0.05)
    assert report["verdict"]["classes_differ"] == 1
    assert report["verdict"]["of_them_within_near_of_a_cut"] == 1
    assert report["verdict"]["right_only_a"] == 1 and report["verdict"]["right_only_b"] == 0
    assert report["metrics"]["answer_relevance"]["max_abs_strength_delta"] == pytest.approx(0.04)


def test_gradings_of_different_items_are_refused() -> None:
    other = grading([0.9, 0.6, 0.1]) | {"y": np.array([0, 1, 2])}
    with pytest.raises(AssertionError, match="same items"):
        compare(grading([0.9, 0.6, 0.1]), other, CUTS, near=0.05)
