"""Several metrics per item on the FAKE engine: batching per sampling setting, skipped metrics, per-segment context
relevance, the main metric's top-level fields, verdict rules, and cancellation translated to conversations."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import pytest
from pydantic import ValidationError

from juiz.agreement.labels import DEFAULT_VERDICT, label_for, with_default_verdict
from juiz.engines.base import CallControl, Completion, Conversation, GenerationRequest
from juiz.engines.fake import FakeEngine
from juiz.judging.judge import Judge
from juiz.judging.judgements import failed_judgement
from juiz.judging.plan import FAST_REQUEST, SEGMENT_COT_REQUEST, provenance_by_metric
from schemas import BatchOptions, JudgementStatus, LabelMapping, Segment, Triple
from schemas.judgement import MetricStatus
from schemas.labels import VerdictLevel

ALL = ["answer_relevance", "groundedness", "context_relevance"]
# These tests are about the CoT prompts' wiring (one call per sampling setting, parsed evidence, the digit's expected
# score): they pin the CoT versions, as the defaults for answer relevance and groundedness are check-based.
COT = {"answer_relevance": "answer_relevance@juiz-1", "groundedness": "groundedness@juiz-1"}


def cot(metrics: list[str] | None = None, **options: object) -> BatchOptions:
    """Options grading `metrics` (default: answer relevance alone) with the CoT prompts."""
    metrics = metrics or ["answer_relevance"]
    return BatchOptions.model_validate({"metrics": metrics, "prompt": [COT[m] for m in metrics if m in COT], **options})


def reply(conversation: Conversation) -> str:
    """Grades that depend on what the prompt shows, so each metric's wiring is visible in the result."""
    user = conversation[-1]["content"]
    if "<segment>" in user or "<segmento>" in user:
        score = 3 if "Paris is the capital" in user else 0
        return f"Criteria: the capital\nSupporting Evidence: seg\nScore: {score}"
    if "<context>" in user or "<contexto>" in user:
        score = 1 if "Lyon" in user.split("<answer>")[-1] else 3
        return f"Criteria: claims\nSupporting Evidence: [1]; Unsupported: none\nScore: {score}"
    return "Criteria: the capital\nSupporting Evidence: names it\nScore: 3"


class Recording(FakeEngine):
    def __init__(self) -> None:
        super().__init__(reply)
        self.requests: list[GenerationRequest] = []
        self.sizes: list[int] = []

    def generate(
        self, conversations: Sequence[Conversation], request: GenerationRequest, control: CallControl | None = None
    ) -> list[Completion]:
        self.requests.append(request)
        self.sizes.append(len(conversations))
        return super().generate(conversations, request)


CONTEXT = [Segment(text="Paris is the capital of France."), Segment(text="Cows have four stomachs.")]


def items() -> list[Triple]:
    q = "What is the capital of France?"
    return [
        Triple(id="right", question=q, answer="Paris.", context=CONTEXT, manual_label="C"),
        Triple(id="wrong", question=q, answer="Lyon.", context=CONTEXT, manual_label="I"),
        Triple(id="bare", question=q, answer="It is Paris."),
    ]


def test_all_metrics_in_one_call_per_sampling_setting_and_shared_segments_once() -> None:
    engine = Recording()
    results = Judge(engine).grade(items(), cot(metrics=ALL))
    # cot: AR for 3 items + groundedness for 2 in one call; the shorter per-segment template in a second call,
    # where both items' segments are the same two conversations (same question, same segments): generated once.
    assert engine.sizes == [5, 2]
    assert engine.requests[1] == SEGMENT_COT_REQUEST
    right, wrong, bare = results
    assert right.metrics is not None and wrong.metrics is not None and bare.metrics is not None
    assert list(right.metrics) == ALL
    assert right.metrics["groundedness"].score == 3 and wrong.metrics["groundedness"].score == 1
    assert right.metrics["groundedness"].provenance is not None
    assert right.metrics["groundedness"].provenance.prompt == "groundedness@juiz-1.en"
    assert right.metrics["groundedness"].supporting_evidence == "[1]; Unsupported: none"


def test_fast_mode_is_one_call_for_every_metric() -> None:
    engine = Recording()
    Judge(engine).grade(items()[:2], cot(metrics=ALL, mode="fast"))
    assert engine.requests == [FAST_REQUEST] and engine.sizes == [2 + 2 + 2]


def test_context_relevance_per_segment_and_its_aggregate() -> None:
    (right, *_) = Judge(Recording()).grade(items(), cot(metrics=ALL))
    assert right.metrics is not None
    cr = right.metrics["context_relevance"]
    assert cr.status is MetricStatus.OK and cr.aggregate == "max"
    assert cr.segments is not None
    assert [(s.index, s.score) for s in cr.segments] == [(0, 3), (1, 0)]
    assert cr.score == 3 and cr.normalized_score == 1.0
    assert cr.mean_score == pytest.approx(0.5)
    assert cr.expected_score is not None and cr.expected_score == max(
        s.expected_score for s in cr.segments if s.expected_score is not None
    )
    assert cr.supporting_evidence == "segments scoring 2 or more: 1"


def test_metrics_that_need_a_context_are_skipped_with_the_reason_never_scored() -> None:
    *_, bare = Judge(Recording()).grade(items(), cot(metrics=ALL))
    assert bare.metrics is not None
    for metric in ("groundedness", "context_relevance"):
        result = bare.metrics[metric]
        assert result.status is MetricStatus.SKIPPED and result.score is None and result.expected_score is None
        assert result.error is not None and "needs a context" in result.error
        assert result.provenance is not None
    assert bare.status is JudgementStatus.OK and bare.score == 3  # answer relevance needs no context


def test_top_level_fields_are_answer_relevance_else_the_first_metric() -> None:
    right, *_ = Judge(Recording()).grade(items(), cot(metrics=["groundedness", "answer_relevance"]))
    assert right.provenance.prompt == "answer_relevance@juiz-1.en" and right.score == 3
    *_, bare = Judge(Recording()).grade(items(), cot(metrics=["groundedness"]))
    assert bare.provenance.prompt == "groundedness@juiz-1.en"
    assert bare.status is JudgementStatus.FAILED and bare.score is None and "needs a context" in (bare.error or "")
    _, wrong, _ = Judge(Recording()).grade(items(), cot(metrics=["groundedness"]))
    assert wrong.score == 1 and wrong.automated_label == "P"  # the default mapping reads the main metric


def test_default_options_are_answer_relevance_only() -> None:
    engine = Recording()
    right, *_ = Judge(engine).grade(items(), cot())
    assert engine.sizes == [3]
    assert right.metrics is not None and list(right.metrics) == ["answer_relevance"]
    assert right.score == right.metrics["answer_relevance"].score == 3 and right.automated_label == "C"


def test_verdict_rule_over_several_metrics() -> None:
    mapping = with_default_verdict(LabelMapping())
    assert mapping.verdict == list(DEFAULT_VERDICT)
    right, wrong, bare = Judge(Recording()).grade(items(), cot(metrics=ALL, label_mapping=mapping))
    assert right.automated_label == "C"  # relevant (3) and grounded (3)
    assert wrong.automated_label == "I"  # relevant (3) but grounded 1 < 1.5
    assert bare.automated_label is None  # groundedness skipped: no label made up


def test_verdict_and_single_metric_from_the_expected_score() -> None:
    (right, wrong, _) = Judge(Recording()).grade(items(), cot(metrics=ALL))
    # FAKE engine: p(chosen digit) = 0.7, others 0.1 → E[3] = 3·(0.1·0+0.1·1+0.1·2+0.7·3)/3/3·3 = 2.4
    on_expected = LabelMapping(metric="answer_relevance", signal="expected_score")
    assert label_for(right, on_expected) == "P"  # 2.4 < 2.5
    assert label_for(right, on_expected.model_copy(update={"thresholds": [0.5, 2.3]})) == "C"
    # Naming no metric, the default verdict reads both (each 2.4 < 2.5: P).
    assert label_for(right, LabelMapping(signal="expected_score", thresholds=[0.5, 2.3])) == "P"
    grounded = LabelMapping(metric="groundedness", signal="expected_score", thresholds=[1.1, 2.3])
    assert label_for(wrong, grounded) == "P"  # 3·E for score 1 = 0.7·1 + 0.1·(0+2+3) = 1.2 ≥ 1.1
    assert label_for(wrong, grounded.model_copy(update={"thresholds": [1.3, 2.3]})) == "I"
    rule = LabelMapping(
        signal="expected_score",
        verdict=[VerdictLevel(label="C", when={"answer_relevance": 2.0, "groundedness": 2.0})],
    )
    assert label_for(right, rule) == "C" and label_for(wrong, rule) == "I"


def test_label_mapping_rejects_bad_rules() -> None:
    with pytest.raises(ValidationError, match="not a class name"):
        LabelMapping(verdict=[VerdictLevel(label="X", when={"groundedness": 2})])
    with pytest.raises(ValidationError, match="unknown metric"):
        LabelMapping(verdict=[VerdictLevel(label="C", when={"faithfulness": 2})])
    with pytest.raises(ValidationError, match="cut points"):
        LabelMapping(thresholds=[1.0])


def test_options_metrics_validation() -> None:
    with pytest.raises(ValidationError):
        BatchOptions(metrics=["answer_relevance", "answer_relevance"])
    with pytest.raises(ValidationError):
        BatchOptions(metrics=[])
    with pytest.raises(ValidationError):
        BatchOptions.model_validate({"metrics": ["faithfulness"]})
    options = BatchOptions(metrics=ALL, prompt=["answer_relevance@trulens-1", "groundedness@juiz-1.pt"])
    right, *_ = Judge(Recording()).grade(items()[:1], options)
    assert right.metrics is not None
    assert right.provenance.prompt == "answer_relevance@trulens-1.en"
    assert right.metrics["groundedness"].provenance is not None
    assert right.metrics["groundedness"].provenance.prompt == "groundedness@juiz-1.pt"


def test_cancelled_items_map_to_the_conversations_serving_only_them() -> None:
    seen: list[list[int]] = []

    class Cancelling(FakeEngine):
        def generate(
            self, conversations: Sequence[Conversation], request: GenerationRequest, control: CallControl | None = None
        ) -> list[Completion]:
            assert control is not None and control.cancelled is not None
            seen.append(sorted(control.cancelled()))
            return super().generate(conversations, request)

    asked: list[int] = []

    def cancelled() -> Collection[int]:
        # Item "right" is cancelled once the cot call is under way (cancelled before it, its conversations would not
        # be sent at all: test_judge.py::test_work_cancelled_before_a_call_is_not_sent).
        asked.append(1)
        return [0] if len(asked) > 1 else []

    Judge(Cancelling(reply)).grade_many(
        [(t, cot(metrics=ALL)) for t in items()], control=CallControl(cancelled=cancelled)
    )
    # cot call: AR right, G right, AR wrong, G wrong, AR bare → only conversations 0 and 1 belong to item 0 alone;
    # segment call: both segments are shared with item "wrong", so nothing is cancelled there.
    assert seen == [[0, 1], []]


def test_failed_judgement_fails_every_metric_with_the_reason() -> None:
    options = BatchOptions(metrics=ALL)
    result = failed_judgement(
        items()[0], options, "engine gone", provenance_by_metric(options, items()[0].question, FakeEngine(lambda _: ""))
    )
    assert result.status is JudgementStatus.FAILED and result.metrics is not None
    assert {m.status for m in result.metrics.values()} == {MetricStatus.FAILED}
    assert result.metrics["context_relevance"].error == "engine gone"
