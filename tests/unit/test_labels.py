"""Manual labels and judge scores on one ordinal scale (default mapping: I=0 ↔ score 0, P=1 ↔ 1–2, C=2 ↔ 3)."""

from __future__ import annotations

import pytest

from juiz.agreement.labels import (
    automated_label,
    class_of_label,
    class_of_score,
    label_unit_value,
    resolve_numeric_scale,
)
from juiz.runtime.errors import InputError
from schemas.labels import LabelClass, LabelMapping

I, P, C = 0, 1, 2  # noqa: E741 - the class names the graders use


@pytest.fixture
def mapping() -> LabelMapping:
    return LabelMapping()


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("C", C),
        ("P", P),
        ("PC", P),
        ("I", I),
        ("c", C),
        ("pc", P),
        ("  P ", P),
        ("Partially Correct", P),
        ("partial", P),
        ("correct", C),
        ("RELEVANT", C),
        ("incorrect", I),
        ("n", I),
    ],
)
def test_named_labels_match_names_and_aliases_ignoring_case(mapping: LabelMapping, label: str, expected: int) -> None:
    assert class_of_label(label, mapping, "0-3") == expected


@pytest.mark.parametrize(
    ("label", "expected"),
    [(0, I), (1, P), (2, P), (3, C), (0.4, I), (2.5, C), (1.6, P), ("2", P), (" 3 ", C), ("0", I), (3.0, C)],
)
def test_numbers_on_the_judge_scale_go_to_the_class_of_the_nearest_score(
    mapping: LabelMapping, label: int | float | str, expected: int
) -> None:
    assert class_of_label(label, mapping, "0-3") == expected


@pytest.mark.parametrize(
    ("label", "expected"),
    # x on 0–1 becomes round(3x): 0.1 → 0, 0.2 → 1, 0.5 → 2 (1.5 rounds up), 0.8 → 2, 0.9 → 3.
    [(0, I), (0.0, I), (0.1, I), (0.2, P), (0.5, P), ("0.5", P), (0.8, P), (0.9, C), (1, C), (1.0, C)],
)
def test_numbers_on_the_unit_scale_are_stretched_to_0_3(
    mapping: LabelMapping, label: int | float | str, expected: int
) -> None:
    assert class_of_label(label, mapping, "0-1") == expected


@pytest.mark.parametrize(("label", "scale"), [(4, "0-3"), (-1, "0-3"), (2, "0-1"), ("1.5", "0-1")])
def test_numbers_outside_the_scale_are_rejected(mapping: LabelMapping, label: int | float | str, scale: str) -> None:
    with pytest.raises(InputError) as caught:
        class_of_label(label, mapping, scale)  # type: ignore[arg-type]
    assert caught.value.field == "manual_label"
    assert scale in caught.value.message


@pytest.mark.parametrize("label", ["maybe", "", "nan", "inf", True])
def test_unknown_label_names_itself_and_the_known_ones(mapping: LabelMapping, label: str | bool) -> None:
    with pytest.raises(InputError) as caught:
        class_of_label(label, mapping, "0-3")
    error = caught.value
    assert error.field == "manual_label"
    assert repr(label) in error.message
    for known in ("'I'", "'P'", "'PC'", "'C'", "'partially correct'"):
        assert known in error.message
    assert "field 'manual_label'" in str(error)


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ([0, 1, 1, 0], "0-3"),  # 0/1 alone is ambiguous: stays on the judge's scale
        ([0, 0.5, 1], "0-1"),
        (["0.5", "C", None], "0-1"),  # names are not numbers; numeric strings are
        ([0.5, 2], "0-3"),  # 2 can't be on 0–1
        ([1.5, 3], "0-3"),
        (["C", "P", "I"], "0-3"),
        ([], "0-3"),
        (["maybe", 0.25], "0-1"),  # unknown names are reported later by class_of_label, not here
    ],
)
def test_auto_scale_is_unit_only_with_fractions_all_in_0_1(
    mapping: LabelMapping, labels: list[str | int | float | None], expected: str
) -> None:
    assert resolve_numeric_scale(labels, mapping) == expected


@pytest.mark.parametrize("scale", ["0-3", "0-1"])
def test_explicit_scale_wins_over_auto(scale: str) -> None:
    mapping = LabelMapping(numeric_scale=scale)
    assert resolve_numeric_scale([0, 0.5, 1], mapping) == scale
    assert resolve_numeric_scale([0, 1], mapping) == scale


@pytest.mark.parametrize(("score", "name"), [(0, "I"), (1, "P"), (2, "P"), (3, "C"), (None, None)])
def test_automated_label_is_the_class_of_the_judge_score(mapping: LabelMapping, score: int | None, name: str) -> None:
    assert automated_label(score, mapping) == name


def test_class_of_score_rejects_scores_off_the_scale(mapping: LabelMapping) -> None:
    assert [class_of_score(s, mapping) for s in range(4)] == [I, P, P, C]
    with pytest.raises(ValueError, match="0–3"):
        class_of_score(4, mapping)


def test_a_custom_mapping_with_four_classes() -> None:
    mapping = LabelMapping(
        classes=[
            LabelClass(name="bad", scores=[0]),
            LabelClass(name="weak", scores=[1]),
            LabelClass(name="fair", aliases=["ok"], scores=[2]),
            LabelClass(name="good", scores=[3]),
        ]
    )
    assert [automated_label(s, mapping) for s in range(4)] == ["bad", "weak", "fair", "good"]
    assert class_of_label("OK", mapping, "0-3") == 2
    assert class_of_label(1, mapping, "0-3") == 1
    assert label_unit_value("weak", mapping, "0-3") == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    ("label", "scale", "expected"),
    [
        ("C", "0-3", 1.0),
        ("P", "0-3", 0.5),  # mean of scores 1 and 2, over 3
        ("partially correct", "0-1", 0.5),
        ("I", "0-3", 0.0),
        (2, "0-3", 2 / 3),
        ("3", "0-3", 1.0),
        (0.5, "0-1", 0.5),
        (0.25, "0-1", 0.25),
        (1, "0-1", 1.0),
    ],
)
def test_label_unit_value(mapping: LabelMapping, label: str | int | float, scale: str, expected: float) -> None:
    assert label_unit_value(label, mapping, scale) == pytest.approx(expected)  # type: ignore[arg-type]


def test_label_unit_value_rejects_unknown_labels(mapping: LabelMapping) -> None:
    with pytest.raises(InputError) as caught:
        label_unit_value("maybe", mapping, "0-3")
    assert caught.value.field == "manual_label"
