"""The web page's items table (filter, sort, page) and its SVG charts, without Redis or a browser."""

from __future__ import annotations

from schemas.labels import LabelClass, LabelMapping
from service.rows import BatchIndex, MetricCell, Query, Row, expected_bins, page_of, score_counts
from service.ui import charts


def row(index: int, score: int, manual: str | None, judge: str, expected: float, status: str = "ok") -> Row:
    classes = ["I", "P", "C"]
    return Row(
        position=index,
        index=index,
        id=f"t{index}",
        status=status,
        score=score,
        normalized_score=score / 3,
        manual_label=manual,
        judge_label=judge,
        judge_class=classes.index(judge),
        question=f"question {index}",
        metrics={"answer_relevance": MetricCell(status, score, expected)},
    )


def index_of(rows: list[Row]) -> BatchIndex:
    index = BatchIndex("b", LabelMapping())
    for r in rows:
        index.add(r)
    return index


ROWS = [
    row(0, 3, "C", "C", 1.0),  # agrees, sure
    row(1, 0, "C", "I", 0.3),  # disagrees by 2, uncertainty |0.3 - 0/3| = 0.3
    row(2, 2, "C", "P", 0.5),  # disagrees by 1, uncertainty |0.5 - 2/3| = 0.17
    row(3, 0, "C", "I", 0.0),  # disagrees by 2, sure
    row(4, 1, None, "P", 0.33),  # unlabelled
]


def ids(page_rows: list) -> list[int]:  # type: ignore[type-arg]
    return [v.row.index for v in page_rows]


def test_disagreements_first_then_the_most_uncertain() -> None:
    page = page_of(index_of(ROWS), Query(), 1, 10)
    assert ids(page.rows) == [1, 3, 2, 0, 4]  # unlabelled (no disagreement figure) last
    assert [v.disagreement for v in page.rows] == [2, 2, 1, 0, None]


def test_filters_sorts_and_pages() -> None:
    index = index_of(ROWS)
    assert ids(page_of(index, Query(disagreement="yes", sort="index", descending=False), 1, 10).rows) == [1, 2, 3]
    assert ids(page_of(index, Query(disagreement="no", sort="index"), 1, 10).rows) == [0]
    assert ids(page_of(index, Query(score=0, sort="index", descending=False), 1, 10).rows) == [1, 3]
    assert ids(page_of(index, Query(label="none"), 1, 10).rows) == [4]
    assert ids(page_of(index, Query(min_uncertainty=0.15, sort="uncertainty"), 1, 10).rows) == [1, 2]
    second = page_of(index, Query(sort="index", descending=False), 2, 2)
    assert ids(second.rows) == [2, 3] and second.pages == 3 and second.total == 5
    assert page_of(index, Query(sort="index"), 99, 2).page == 3  # past the end: the last page


def test_a_custom_mapping_filters_by_its_own_class_names() -> None:
    mapping = LabelMapping(
        classes=[LabelClass(name="bad", scores=[0, 1]), LabelClass(name="good", aliases=["ok"], scores=[2, 3])]
    )
    from dataclasses import replace

    index = BatchIndex("b", mapping)
    index.add(replace(row(0, 3, "ok", "C", 1.0), judge_label="good", judge_class=1))
    index.add(replace(row(1, 0, "bad", "I", 0.0), judge_label="bad", judge_class=0))
    page = page_of(index, Query(label="good"), 1, 10)
    assert ids(page.rows) == [0]
    assert page.rows[0].manual_name == "good"  # the alias is shown as its class


def test_the_metric_filter_switches_judge_label_disagreement_and_status() -> None:
    """Under another metric, the judge's class and the disagreement come from that metric's own score, and an item
    whose metric was skipped shows (and filters as) skipped, not the item's overall ok."""
    from dataclasses import replace

    rows = [
        replace(
            row(0, 3, "C", "C", 1.0),
            metrics={**row(0, 3, "C", "C", 1.0).metrics, "groundedness": MetricCell("ok", 0, 0.0)},
        ),
        replace(
            row(1, 3, "C", "C", 1.0),
            metrics={**row(1, 3, "C", "C", 1.0).metrics, "groundedness": MetricCell("skipped", None, None)},
        ),
    ]
    index = index_of(rows)
    under_ar = page_of(index, Query(sort="index", descending=False), 1, 10).rows
    assert [v.judge_name for v in under_ar] == ["C", "C"] and [v.disagreement for v in under_ar] == [0, 0]
    under_g = page_of(index, Query(metric="groundedness", sort="index", descending=False), 1, 10).rows
    assert [v.judge_name for v in under_g] == ["I", None] and [v.disagreement for v in under_g] == [2, None]
    assert [v.status for v in under_g] == ["ok", "skipped"]
    assert ids(page_of(index, Query(metric="groundedness", status="ok"), 1, 10).rows) == [0]
    assert ids(page_of(index, Query(metric="groundedness", status="skipped"), 1, 10).rows) == [1]


def test_histograms_count_scores_and_unscored_items() -> None:
    rows = [*ROWS, row(5, 0, "C", "I", 0.0, status="parse_error")]
    rows[-1].metrics["answer_relevance"] = MetricCell("parse_error", None, None)
    counts = score_counts(rows, "answer_relevance")
    assert counts == {"0": 2, "1": 1, "2": 1, "3": 1, "parse_error": 1}
    assert sum(expected_bins(rows, "answer_relevance")) == 5
    svg = charts.score_histogram(counts, "answer_relevance")
    assert svg.startswith("<svg") and "parse_error: 1" in svg


def test_chart_text_is_escaped() -> None:
    svg = charts.heat_map([[1, 0], [2, 3]], ["<script>x</script>", "ok & fine"])
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "ok &amp; fine" in svg
    assert 'fill-opacity="1.00"' in svg  # the whole first row is one cell


def test_calibrated_labels_get_their_own_agreement_beside_the_raw_one() -> None:
    from dataclasses import replace

    from service.rows import agreement_of

    # Raw: 2 of 4 right. Calibrated: all 4 right.
    rows = [
        replace(row(0, 3, "C", "C", 1.0), calibrated_label="C"),
        replace(row(1, 0, "C", "I", 0.0), calibrated_label="C"),
        replace(row(2, 0, "I", "I", 0.0), calibrated_label="I"),
        replace(row(3, 3, "I", "C", 1.0), calibrated_label="I"),
    ]
    report, complete = agreement_of(index_of(rows), 10_000, final=False)
    assert complete
    assert report.calibration is not None and report.calibration.raw and report.calibration.calibrated
    assert report.calibration.raw.accuracy.value == 0.5
    assert report.calibration.calibrated.accuracy.value == 1.0
    assert report.bootstrap.resamples == 0  # no intervals while the batch runs


def test_the_results_own_uncertainty_wins_over_the_expected_score_distance() -> None:
    from dataclasses import replace

    rows = [replace(row(0, 3, "C", "C", 1.0), uncertainty=0.9, uncertain=True), row(1, 0, "C", "I", 0.3)]
    page = page_of(index_of(rows), Query(sort="uncertainty"), 1, 10)
    assert ids(page.rows) == [0, 1] and page.rows[1].uncertainty == 0.3
    assert ids(page_of(index_of(rows), Query(uncertain=True), 1, 10).rows) == [0]


def test_intervals_come_from_a_background_bootstrap_once_the_batch_is_over() -> None:
    from service.rows import _BOOTSTRAPS, agreement_of

    index = index_of(ROWS)
    points, complete = agreement_of(index, 10_000, final=True)
    assert not complete and points.bootstrap.resamples == 0 and points.accuracy.value == 0.25
    _BOOTSTRAPS.submit(lambda: None).result()  # the pool runs one job at a time: the bootstrap is done after this
    report, complete = agreement_of(index, 10_000, final=True)
    assert complete and report.bootstrap.resamples == 200 and report.accuracy.value == 0.25
    assert report.accuracy.ci95 is not None


def test_items_filter_by_an_extra_field() -> None:
    from dataclasses import replace

    from service.rows import field_names

    rows = [
        replace(row(0, 3, "C", "C", 1.0), fields={"course": "ML-101", "week": "3"}),
        replace(row(1, 0, "C", "I", 0.0), fields={"course": "NLP-201"}),
        row(2, 2, "C", "P", 0.5),
    ]
    index = index_of(rows)
    assert field_names(rows) == ["course", "week"]
    assert ids(page_of(index, Query(field="course", sort="index", descending=False), 1, 10).rows) == [0, 1]
    assert ids(page_of(index, Query(field="course", value="ml-1"), 1, 10).rows) == [0]
    assert ids(page_of(index, Query(field="week"), 1, 10).rows) == [0]


def test_the_page_names_the_verdict_rule_that_labelled_the_results() -> None:
    from service.ui.batch_page import judge_label_source

    pair = judge_label_source(LabelMapping(), True, ["answer_relevance", "groundedness"])
    triad = judge_label_source(LabelMapping(), True, ["answer_relevance", "completeness", "groundedness"])
    assert "groundedness ≥ 2.5" in pair and "completeness" not in pair
    assert "completeness ≥ 2.5" in triad  # TRIAD_VERDICT labels them when completeness is graded
    assert "verdict" not in judge_label_source(LabelMapping(), False, ["answer_relevance"])


def test_labels_per_metric_get_intervals_with_the_rest_of_the_section() -> None:
    from dataclasses import replace

    from schemas.annotation import Annotation
    from service.rows import _BOOTSTRAPS, agreement_of, metric_label_agreement

    labelled = [
        replace(r, annotations=(Annotation(annotator="ann", label=label, metric="answer_relevance"),))
        for r, label in zip(ROWS, ["C", "C", "P", "I", "P"], strict=True)
    ]
    index = index_of(labelled)
    agreement_of(index, 10_000, final=True)
    points = metric_label_agreement(index)["answer_relevance"]
    assert points.n == 5 and points.accuracy.ci95 is None  # the points first, as the main report's
    _BOOTSTRAPS.submit(lambda: None).result()  # the pool runs one job at a time: the bootstrap is done after this
    _, complete = agreement_of(index, 10_000, final=True)
    report = metric_label_agreement(index)["answer_relevance"]
    assert complete and report.accuracy.value == points.accuracy.value and report.accuracy.ci95 is not None
