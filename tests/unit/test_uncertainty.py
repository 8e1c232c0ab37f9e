"""Several sampled replies per item, their majority and spread, and the `uncertain` flag, with a FAKE engine that
returns the replies a test chooses."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic import ValidationError

from juiz.engines.base import Conversation
from juiz.engines.fake import FakeEngine
from juiz.judging.judge import Judge
from juiz.judging.uncertainty import MIN_MAJORITY_SHARE, assess, uncertain_first
from schemas import BatchOptions, Judgement, Triple

ITEM = Triple(id="q1", question="What is a B-tree?", answer="A balanced search tree.")
# Samples are CoT replies (a check-based prompt's spread is its probabilities): these tests pin the CoT prompt.
COT = "answer_relevance@juiz-1"


def _reply(score: int | str) -> str:
    return f"Criteria: the question asks what a B-tree is.\nSupporting Evidence: reply {score}.\nScore: {score}"


def fake_sampling_engine(replies: list[int | str]) -> FakeEngine:
    """A FAKE engine whose successive replies (the n samples of one conversation) are `replies`, in order."""
    queue: Iterator[int | str] = iter(replies)

    def reply(conversation: Conversation) -> str:
        return _reply(next(queue))

    return FakeEngine(reply, model_id="fake-sampling")


def grade(replies: list[int | str], **options: object) -> Judgement:
    engine = fake_sampling_engine(replies)
    (judgement,) = Judge(engine).grade([ITEM], BatchOptions(prompt=COT, **options))  # type: ignore[arg-type]
    return judgement


def test_three_samples_give_majority_mean_and_spread() -> None:
    judgement = grade([3, 3, 2], samples=3)
    samples = judgement.samples
    assert samples is not None
    assert (samples.n, samples.scores, samples.majority) == (3, [3, 3, 2], 3)
    assert samples.mean == pytest.approx(8 / 3, abs=1e-6)
    assert samples.std == pytest.approx(((2 * (1 / 3) ** 2 + (2 / 3) ** 2) / 3) ** 0.5, abs=1e-6)
    assert samples.majority_share == pytest.approx(2 / 3, abs=1e-6)
    assert samples.temperature == 0.7  # the default for several samples
    assert judgement.score == 3
    assert judgement.supporting_evidence == "reply 3."  # a reply that gave the majority score speaks for it
    # FakeEngine puts 0.7 on the chosen digit and 0.1 on each other: expected 2.4/3 for a 3, 1.8/3 for a 2.
    assert judgement.expected_score == pytest.approx((2.4 + 2.4 + 1.8) / 3 / 3, abs=1e-6)
    assert judgement.provenance.sampling["n"] == 3
    assert judgement.metrics is not None and judgement.metrics["answer_relevance"].samples == samples


def test_disagreeing_samples_are_uncertain_and_ties_go_to_the_lower_score() -> None:
    judgement = grade([3, 1, 2], samples=3)
    assert judgement.samples is not None and judgement.samples.majority == 1
    assert judgement.score == 1
    assert judgement.uncertain is True
    assert judgement.uncertainty is not None
    assert judgement.uncertainty.dispersion == pytest.approx(2 / 3, abs=1e-6)
    assert any("samples disagree" in r for r in judgement.uncertainty.reasons)


def test_an_unparsed_sample_counts_against_agreement_but_never_as_a_score() -> None:
    judgement = grade([3, "three", 3, 3, 2], samples=5)
    assert judgement.samples is not None
    assert judgement.samples.scores == [3, None, 3, 3, 2]
    assert judgement.samples.majority_share == pytest.approx(3 / 5)
    assert judgement.samples.mean == pytest.approx(11 / 4)
    assert MIN_MAJORITY_SHARE > 3 / 5 and judgement.uncertain is True


def test_all_samples_unparsed_is_a_parse_error_with_the_spread() -> None:
    judgement = grade(["x", "y", "z"], samples=3)
    assert judgement.status == "parse_error" and judgement.score is None
    assert judgement.samples is not None and judgement.samples.scores == [None, None, None]


def test_expected_score_near_a_cut_point_is_uncertain_without_samples() -> None:
    near = grade([3])  # expected 2.4 on 0–3: 0.1 from the P/C cut at 2.5
    far = grade([1])  # expected 1.2: far from 0.5 and 2.5
    assert near.samples is None and near.uncertain is True
    assert near.uncertainty is not None and "cut point 2.5" in near.uncertainty.reasons[0]
    assert far.uncertain is False and far.uncertainty is not None and far.uncertainty.reasons == []
    assert uncertain_first([far, near]) == [near, far]


def test_sampling_options_are_checked() -> None:
    with pytest.raises(ValidationError, match="needs mode cot"):
        BatchOptions(samples=3, mode="fast")
    with pytest.raises(ValidationError, match="temperature above 0"):
        BatchOptions(samples=3, temperature=0)
    with pytest.raises(ValidationError, match="less than or equal to 8"):
        BatchOptions(samples=9)
    assert BatchOptions().sampling_temperature == 0.0
    assert BatchOptions(samples=2, temperature=1.0).sampling_temperature == 1.0


def test_one_sample_keeps_the_greedy_request_and_its_provenance() -> None:
    judgement = grade([2])
    assert "n" not in judgement.provenance.sampling and judgement.provenance.sampling["temperature"] == 0.0


def _check_judge(conversation: Conversation) -> str:
    """A FAKE check judge: a reference of two points, no sentence aimed at a grader, yes to every other check."""
    if "key points" in conversation[-1]["content"]:
        return "- Paris is the capital of France.\n- It has two million people."
    if "speaks to someone other than the person who asked" in conversation[0]["content"]:
        return "No"
    return "Yes"


def _with_grader_flag(judgement: Judgement, p_yes: float) -> Judgement:
    """The same result with the per-sentence grader flag (a veto where yes means bad) read at `p_yes`."""
    result = judgement.metrics["answer_relevance"]  # type: ignore[index]
    checks = [
        c.model_copy(update={"p_yes": p_yes}) if c.name == "sentence_to_grader" else c for c in result.checks or []
    ]
    return judgement.model_copy(
        update={
            "metrics": {**(judgement.metrics or {}), "answer_relevance": result.model_copy(update={"checks": checks})}
        }
    )


@pytest.mark.parametrize(
    ("prompt", "on_the_line"),
    [("answer_relevance@checks-7", 0.52), (None, 0.24)],
    ids=["checks-7: P(yes) 0.52 against 0.5", "default: 0.14 above its own points' 0.10, margin 0.12"],
)
def test_a_check_based_grade_whose_veto_sits_on_its_threshold_is_uncertain(
    prompt: str | None, on_the_line: float
) -> None:
    """Graded twice, an answer read 0.47 and 0.50 by a veto at 0.5 and went from 0 to 3: such a grade is a coin
    toss, so it is flagged for a person, whatever the rest of the checks say; a clear reading is not. A veto read
    against the judge's own points (checks-8) is on the line where its gap is the rule's margin."""
    item = Triple(
        id="q1",
        question="What is the capital of France?",
        answer="Paris is the capital.",
        context="Paris is the capital of France.",
    )
    options = BatchOptions(prompt=prompt) if prompt else BatchOptions()
    (graded,) = Judge(FakeEngine(_check_judge)).grade([item], options)
    result = (graded.metrics or {})["answer_relevance"]
    assert result.provenance is not None and result.provenance.prompt.startswith("answer_relevance@checks")
    mapping = options.label_mapping
    near, clear = (
        assess(_with_grader_flag(graded, on_the_line), mapping),
        assess(_with_grader_flag(graded, 0.1), mapping),
    )
    assert near is not None and clear is not None
    assert "answer_relevance's veto sentence_to_grader sinks it by 0.02 (within 0.05 of its threshold)" in near.reasons
    assert near.veto == pytest.approx(0.8) and near.score >= 0.8
    assert clear.veto == 0.0 and not any("veto" in reason for reason in clear.reasons)
