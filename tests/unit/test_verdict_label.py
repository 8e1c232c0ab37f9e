"""The verdict is the item's label: with a second metric graded, the top-level grade, the automated label, the report's
label, agreement's default and the page's judge column come from the verdict rule; each metric keeps its own grade."""

from __future__ import annotations

from juiz.agreement.labels import DEFAULT_VERDICT, VERDICT, label_source
from juiz.agreement.statistics import compute_agreement
from juiz.engines.base import Conversation
from juiz.engines.fake import FakeEngine
from juiz.formats.report import render_report
from juiz.judging.explain import verdict_in_words
from juiz.judging.judge import Judge
from juiz.judging.judgements import finished
from schemas import BatchOptions, Judgement, JudgementStatus, LabelMapping, Segment, Triple
from schemas.labels import VerdictLevel
from service.rows import BatchIndex, judge_source, row_of, view_rows

COT = {"answer_relevance": "answer_relevance@juiz-1", "groundedness": "groundedness@juiz-1"}
CONTEXT = [Segment(text="Paris is the capital of France.")]
Q = "What is the capital of France?"


def options(metrics: list[str], **more: object) -> BatchOptions:
    return BatchOptions.model_validate({"metrics": metrics, "prompt": [COT[m] for m in metrics], **more})


def reply(conversation: Conversation) -> str:
    """Relevant always (3); grounded 3 unless the answer says Lyon (1) or Nice (no score: a parse error)."""
    user = conversation[-1]["content"]
    if "<context>" in user:
        answer = user.split("<answer>")[-1]
        if "Nice" in answer:
            return "I can't say."
        score = 1 if "Lyon" in answer else 3
        return f"Criteria: claims\nSupporting Evidence: [1]; Unsupported: none\nScore: {score}"
    return "Criteria: the capital\nSupporting Evidence: names it\nScore: 3"


def items() -> list[Triple]:
    return [
        Triple(id="right", question=Q, answer="Paris.", context=CONTEXT, manual_label="C"),
        Triple(id="unsupported", question=Q, answer="Lyon.", context=CONTEXT, manual_label="I"),
        Triple(id="bare", question=Q, answer="It is Paris.", manual_label="C"),
        Triple(id="unparsed", question=Q, answer="Nice.", context=CONTEXT),
    ]


def graded(opts: BatchOptions) -> dict[str, Judgement]:
    return {j.id: j for j in Judge(FakeEngine(reply)).grade(items(), opts)}


def test_a_two_metric_result_is_labelled_by_the_verdict_and_keeps_each_metric() -> None:
    by_id = graded(options(["answer_relevance", "groundedness"]))
    unsupported = by_id["unsupported"]
    # Relevant (3) but grounded 1: the default verdict makes it I, and the top-level grade says the same.
    assert unsupported.label_source == VERDICT and unsupported.automated_label == "I"
    assert unsupported.score == 0 and unsupported.status is JudgementStatus.OK
    assert unsupported.metrics["answer_relevance"].score == 3
    assert "answer_relevance 3, groundedness 1 → I" in unsupported.supporting_evidence
    right = by_id["right"]
    assert right.automated_label == "C" and right.score == 3 and right.label_source == VERDICT


def test_the_verdict_score_stays_in_its_class_and_the_expected_score_is_the_weakest() -> None:
    mapping = LabelMapping(verdict=[VerdictLevel(label="C", when={"answer_relevance": 3, "groundedness": 1})])
    unsupported = graded(options(["answer_relevance", "groundedness"], label_mapping=mapping))["unsupported"]
    # C by this rule: the score is lifted into C's scores (3) so score and label name the same class.
    assert unsupported.automated_label == "C" and unsupported.score == 3
    metrics = unsupported.metrics
    low = min(metrics["answer_relevance"].expected_score, metrics["groundedness"].expected_score)
    assert unsupported.expected_score == low


def test_without_a_context_or_with_one_metric_the_main_metric_labels_as_before() -> None:
    bare = graded(options(["answer_relevance", "groundedness"]))["bare"]
    assert bare.label_source == "answer_relevance" and bare.automated_label == "C" and bare.score == 3
    alone = graded(options(["answer_relevance"]))["unsupported"]
    assert alone.label_source == "answer_relevance" and alone.automated_label == "C"
    named = graded(options(["answer_relevance", "groundedness"], label_mapping=LabelMapping(metric="answer_relevance")))
    assert named["unsupported"].label_source == "answer_relevance" and named["unsupported"].score == 3


def test_a_rule_metric_without_a_grade_leaves_no_label_and_says_why() -> None:
    unparsed = graded(options(["answer_relevance", "groundedness"]))["unparsed"]
    assert unparsed.status is JudgementStatus.PARSE_ERROR and unparsed.automated_label is None
    assert unparsed.score is None and "groundedness" in (unparsed.error or "")
    assert unparsed.metrics["answer_relevance"].score == 3


def test_finishing_again_under_another_mapping_gives_that_mappings_result() -> None:
    opts = options(["answer_relevance", "groundedness"])
    unsupported = graded(opts)["unsupported"]
    by_metric = finished(
        unsupported, opts.model_copy(update={"label_mapping": LabelMapping(metric="answer_relevance")})
    )
    assert by_metric.score == 3 and by_metric.automated_label == "C" and by_metric.label_source == "answer_relevance"
    again = finished(by_metric, opts)
    assert again.score == 0 and again.automated_label == "I" and again.label_source == VERDICT


def test_agreement_report_and_page_read_the_verdict() -> None:
    opts = options(["answer_relevance", "groundedness"])
    results = list(graded(opts).values())
    report = compute_agreement(results, opts.label_mapping, resamples=0)
    # right C/C, unsupported I/I, bare C/C: the unsupported answer no longer reads as relevance's C.
    assert report.n == 3 and report.accuracy.value == 1.0
    text = render_report([results[1]])
    assert "**Answer Relevance (AR)**: 1.00" in text and "**Groundedness (G)**: 0.33" in text
    assert "**Automated label**: I" in text and "Score: 3" in text  # AR's own reasoning, not the verdict's
    index = BatchIndex("b", opts.label_mapping)
    for position, judgement in enumerate(results):
        index.add(row_of(position, position, judgement, opts.label_mapping))
    assert judge_source(index) == VERDICT
    under_relevance = {v.row.id: v.judge_name for v in view_rows(index, "answer_relevance")}
    assert under_relevance["unsupported"] == "C"  # the column shows relevance's own class
    assert index.rows[1].judge_label == "I"


def test_label_source_of_results_without_metrics_is_answer_relevance() -> None:
    alone = graded(options(["answer_relevance"]))["right"]
    legacy = alone.model_copy(update={"metrics": None})
    assert label_source(legacy, LabelMapping()) == "answer_relevance"


def test_agreement_reads_the_verdict_of_results_written_before_it_was_the_label() -> None:
    opts = options(["answer_relevance", "groundedness"])
    unsupported = graded(opts)["unsupported"]
    # As written before: answer relevance's grade on top, its label C.
    old = unsupported.model_copy(update={"score": 3, "automated_label": "C", "label_source": None})
    report = compute_agreement([old], opts.label_mapping, resamples=0)
    assert report.n == 1 and report.confusion_matrix[0][0] == 1  # manual I, judge I (the verdict)


def test_the_verdict_is_told_in_words_in_the_items_language_with_what_kept_it_from_the_class_above() -> None:
    by_id = graded(options(["answer_relevance", "groundedness"]))
    unsupported, right = by_id["unsupported"], by_id["right"]
    assert unsupported.supporting_evidence.startswith(
        "I: Answer relevance 3 of 3, support by the context 1 of 3. Support by the context 1 of 3 keeps it from P, "
        "which needs support by the context 2 or more."
    )
    assert "Every grade reaches what C needs." in right.supporting_evidence
    portuguese = verdict_in_words(
        ["I", "P", "C"], DEFAULT_VERDICT, "P", {"answer_relevance": 2.0, "groundedness": 3.0}, "pt"
    )
    assert portuguese == (
        "P: Relevância da resposta 2 de 3, apoio no contexto 3 de 3. Relevância da resposta 2 de 3 a impede de ser "
        "C, que pede relevância da resposta 3 ou mais."
    )
    # Expected scores reach a minimum of 2.5 at 2.5, not at the next whole score.
    fractions = verdict_in_words(
        ["I", "P", "C"], DEFAULT_VERDICT, "P", {"answer_relevance": 2.1, "groundedness": 2.94}, "en"
    )
    assert fractions.endswith("keeps it from C, which needs answer relevance 2.5 or more.")
