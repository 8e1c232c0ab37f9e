"""The judge's orchestration, on the FAKE engine: batching, statuses, provenance, pass-through, failures."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

import prompts
from juiz.engines.base import IN_PROCESS, CallControl, Completion, Conversation, GenerationRequest, JudgeEngine
from juiz.engines.fake import FakeEngine
from juiz.judging.judge import Judge
from juiz.judging.parsing import COT_REPLY_REGEX, SEGMENT_REPLY_REGEX
from juiz.runtime.errors import EngineDeadError, EngineError, TransientEngineError
from schemas import BatchOptions, JudgementStatus, Triple
from schemas.judgement import CheckStatus

# Tests of chain-of-thought behaviour (reply grammar, parsed criteria, fast mode's digit, one call per mode) pin the
# CoT prompt; the defaults are check-based (checks-17, checks-8). Tests of what holds whatever the prompt run with both.
COT = BatchOptions(prompt="answer_relevance@juiz-1")
BOTH_PROMPTS = pytest.mark.parametrize("options", [BatchOptions(), COT], ids=["default", "cot"])


def reply_by_answer(conversation: Conversation) -> str:
    """A CoT reply by the answer's text; a check prompt's yes/no question is answered "Yes"."""
    user = conversation[-1]["content"]
    if prompts.asks_yes_no(user):
        return "Yes"
    if "garbled" in user:
        return "I think it is fine."
    if "partial" in user:
        return "Criteria: c\nSupporting Evidence: only part\nScore: 2"
    if "digit" in user or "dígito" in user:
        return "3"
    return "Criteria: the capital\nSupporting Evidence: names it\nScore: 3"


def triples() -> list[Triple]:
    return [
        Triple(id="a", question="What is the capital of France?", answer="Paris.", manual_label="C", team="x"),
        Triple(id="b", question="Qual é a capital de França?", answer="partial", manual_label="P"),
        Triple(id="c", question="What?", answer="garbled"),
    ]


def test_all_items_go_to_the_engine_in_one_call() -> None:
    engine = FakeEngine(reply_by_answer)
    judge = Judge(engine)
    results = judge.grade(triples(), COT)
    assert engine.calls == [3]
    assert [r.id for r in results] == ["a", "b", "c"]


def test_statuses_scores_and_labels() -> None:
    a, b, c = Judge(FakeEngine(reply_by_answer)).grade(triples(), COT)
    assert (a.status, a.score, a.normalized_score, a.automated_label) == (JudgementStatus.OK, 3, 1.0, "C")
    assert (b.status, b.score, b.automated_label) == (JudgementStatus.OK, 2, "P")
    assert b.normalized_score == pytest.approx(2 / 3)
    assert a.expected_score is not None and 0 <= a.expected_score <= 1
    assert a.criteria == "the capital" and a.supporting_evidence == "names it"
    # an unparseable reply is an explicit state with the raw text kept, never a silent 0
    assert c.status == JudgementStatus.PARSE_ERROR
    assert c.score is None and c.normalized_score is None and c.automated_label is None
    assert c.raw_output == "I think it is fine." and c.error


def test_provenance_and_passthrough() -> None:
    a, b, _ = Judge(FakeEngine(reply_by_answer, model_id="fake-judge")).grade(triples(), COT)
    assert a.provenance.model == "fake-judge"
    assert a.provenance.prompt == "answer_relevance@juiz-1.en"
    assert b.provenance.prompt == "answer_relevance@juiz-1.pt"
    assert len(a.provenance.prompt_sha256) == 64
    assert a.provenance.sampling["temperature"] == 0.0 and a.provenance.sampling["mode"] == "cot"
    assert a.provenance.juiz_version
    assert a.model_extra == {"team": "x"}
    assert a.question == "What is the capital of France?" and a.manual_label == "C"


class RecordsRequests(FakeEngine):
    """The FAKE engine, keeping every request it was called with."""

    def __init__(self, reply: Callable[[Conversation], str]) -> None:
        super().__init__(reply)
        self.requests: list[GenerationRequest] = []

    def generate(
        self, conversations: Sequence[Conversation], request: GenerationRequest, control: CallControl | None = None
    ) -> list[Completion]:
        self.requests.append(request)
        return super().generate(conversations, request)


def test_fast_mode_uses_a_single_token_choice() -> None:
    engine = RecordsRequests(reply_by_answer)
    seen = engine.requests
    (a,) = Judge(engine).grade(triples()[:1], COT.model_copy(update={"mode": "fast"}))
    assert seen[0].max_tokens == 1 and seen[0].choice == ("0", "1", "2", "3")
    assert a.score == 3 and a.provenance.sampling["mode"] == "fast"


def test_cot_requests_the_reply_grammar() -> None:
    engine = RecordsRequests(reply_by_answer)
    seen = engine.requests
    Judge(engine).grade(triples()[:1], COT)
    assert seen[0].regex == COT_REPLY_REGEX and seen[0].temperature == 0.0


def test_mixed_options_share_calls_by_mode() -> None:
    engine = FakeEngine(reply_by_answer)
    items = [(t, BatchOptions(prompt="answer_relevance@trulens-1")) for t in triples()]
    items += [(t, COT) for t in triples()]
    items += [(triples()[0], COT.model_copy(update={"mode": "fast"}))]
    results = Judge(engine).grade_many(items)
    assert engine.calls == [6, 1]
    assert results[0].provenance.prompt == "answer_relevance@trulens-1.en"
    assert results[3].provenance.prompt == "answer_relevance@juiz-1.en"


class RejectsLongAnswers:
    """A fake engine that fails a whole batch when any item is too long, as vLLM does for over-long prompts."""

    model_id = "fake-rejecting"
    origin = IN_PROCESS

    def __init__(self) -> None:
        self.inner: JudgeEngine = FakeEngine(reply_by_answer)

    def generate(
        self, conversations: Sequence[Conversation], request: GenerationRequest, control: CallControl | None = None
    ) -> list[Completion]:
        if any("LONG" in c[-1]["content"] for c in conversations):
            raise EngineError("prompt longer than max_model_len")
        return self.inner.generate(conversations, request, control)


@BOTH_PROMPTS
def test_one_bad_item_fails_alone_and_the_rest_are_graded(options: BatchOptions) -> None:
    items = [Triple(id=str(i), question="Q?", answer="LONG" if i == 5 else "fine") for i in range(8)]
    results = Judge(RejectsLongAnswers()).grade(items, options)
    statuses = [r.status for r in results]
    assert statuses.count(JudgementStatus.FAILED) == 1
    assert results[5].status == JudgementStatus.FAILED and "max_model_len" in (results[5].error or "")
    assert all(r.status == JudgementStatus.OK for i, r in enumerate(results) if i != 5)


@BOTH_PROMPTS
def test_a_request_the_engine_dropped_is_failed_not_a_parse_error(options: BatchOptions) -> None:
    class Dropping(FakeEngine):
        def generate(
            self, conversations: Sequence[Conversation], request: GenerationRequest, control: CallControl | None = None
        ) -> list[Completion]:
            dropped = "the engine dropped the request (finish_reason=error)"
            return [Completion(text="", error=dropped) for _ in conversations]  # a check prompt asks several

    (result,) = Judge(Dropping(reply_by_answer)).grade(triples()[:1], options)
    assert result.status == JudgementStatus.FAILED and "dropped" in (result.error or "")
    assert result.score is None and result.raw_output is None


def test_warm_up_compiles_both_grammars_with_one_token() -> None:
    engine = RecordsRequests(reply_by_answer)
    seen = engine.requests
    Judge(engine).warm_up()
    assert [r.max_tokens for r in seen] == [1, 1, 1]
    assert seen[0].regex == COT_REPLY_REGEX and seen[2].choice == ("0", "1", "2", "3")
    assert seen[1].regex == SEGMENT_REPLY_REGEX  # context relevance's shorter per-segment template


@BOTH_PROMPTS
def test_user_fields_named_like_result_fields_are_kept_apart(options: BatchOptions) -> None:
    triple = Triple(id="g", question="Q?", answer="A.", expected_score=0.2, status="draft", team="x")
    (result,) = Judge(FakeEngine(reply_by_answer)).grade([triple], options)
    assert result.status == JudgementStatus.OK and result.expected_score != 0.2
    assert result.model_extra == {"input_expected_score": 0.2, "input_status": "draft", "team": "x"}


class VLLMValidationError(Exception):
    """Stands in for vLLM's (VLLMError(Exception)), which the judge must isolate though it is no EngineError."""


class FailsOn:
    """A FAKE engine that raises `error` for a whole call when any conversation holds `marker`."""

    model_id = "fake-failing"
    origin = IN_PROCESS

    def __init__(self, marker: str, error: BaseException) -> None:
        self.marker, self.error = marker, error
        self.inner = FakeEngine(reply_by_answer)

    def generate(
        self, conversations: Sequence[Conversation], request: GenerationRequest, control: CallControl | None = None
    ) -> list[Completion]:
        if any(self.marker in c[-1]["content"] for c in conversations):
            raise self.error
        return self.inner.generate(conversations, request, control)


@BOTH_PROMPTS
def test_any_engine_exception_fails_only_its_item_and_its_text_stays_there(options: BatchOptions) -> None:
    secret = "tenant A's prompt (length 9000) is longer than the maximum model length"
    items = [(Triple(id=f"b-{i}", question="Q?", answer="TOO-LONG" if i == 2 else "fine"), options) for i in range(6)]
    results = Judge(FailsOn("TOO-LONG", VLLMValidationError(secret))).grade_many(items)
    assert results[2].status == JudgementStatus.FAILED and secret in (results[2].error or "")
    others = [r for i, r in enumerate(results) if i != 2]
    assert all(r.status == JudgementStatus.OK and r.error is None for r in others)
    assert not any(secret in r.model_dump_json() for r in others)


@pytest.mark.parametrize(
    "error",
    [EngineDeadError("the engine core died"), TransientEngineError("server unavailable")],
    ids=["dead", "transient"],
)
def test_call_level_errors_are_never_isolated(error: EngineError) -> None:
    engine = FailsOn("", error)  # every call fails
    with pytest.raises(type(error)):
        Judge(engine).grade(triples())
    assert engine.inner.calls == []  # raised at once: no splitting, no retries of halves


def test_a_job_timeout_is_never_isolated() -> None:
    from rq.timeouts import JobTimeoutException

    engine = FailsOn("", JobTimeoutException("Task exceeded maximum timeout value (1 seconds)"))
    with pytest.raises(JobTimeoutException):
        Judge(engine).grade(triples())
    assert engine.inner.calls == []


@BOTH_PROMPTS
def test_grade_many_passes_the_control_to_the_engine(options: BatchOptions) -> None:
    items = [(t, options) for t in triples()]
    control = CallControl(cancelled=lambda: [1])  # item b
    results = Judge(FakeEngine(reply_by_answer)).grade_many(items, control)
    assert results[1].status == JudgementStatus.FAILED and results[1].error == "cancelled"
    assert results[0].status == JudgementStatus.OK
    expired = Judge(FakeEngine(reply_by_answer)).grade_many(items, CallControl(deadline=0.0))
    assert all(r.status == JudgementStatus.FAILED and "timed out" in (r.error or "") for r in expired)


def test_work_cancelled_before_a_call_is_not_sent() -> None:
    """An item cancelled before its conversations are sent (here between a check-based metric's references and its
    checks) costs the engine nothing: its conversations come back aborted without reaching it."""
    cancelled: set[int] = set()
    engine = FakeEngine(lambda _: "Yes")
    original = engine.generate

    def generate_then_cancel(conversations: Any, request: Any, control: Any = None) -> Any:
        out = original(conversations, request, control)
        cancelled.add(1)  # item b is cancelled once the first wave is back
        return out

    engine.generate = generate_then_cancel  # type: ignore[method-assign]
    # checks-5: a reference per item first (one point: "Yes" is too short to be one, so the per-point check fails),
    # then every check once per item and one per sentence
    items = [(t, BatchOptions(prompt="answer_relevance@checks-5")) for t in triples()[:2]]
    results = Judge(engine).grade_many(items, CallControl(cancelled=lambda: sorted(cancelled)))
    kept, dropped = (results[i].metrics["answer_relevance"].checks or [] for i in (0, 1))  # type: ignore[index]
    asked = [c for c in kept if c.status is CheckStatus.OK]
    assert engine.calls == [2, len(asked)]  # the references; then item a's checks only
    cancelled_checks = [c for c in dropped if c.error == "cancelled"]
    assert cancelled_checks and len(cancelled_checks) == len([c for c in dropped if c.status is CheckStatus.FAILED]) - 1


class TakesOnce:
    """An interjection that has work to take once the engine has finished `after` conversations."""

    def __init__(self, engine: FakeEngine, after: int) -> None:
        self.engine, self.after, self.finished = engine, after, 0
        self.taken = self.served = 0

    def take(self) -> bool:
        if self.taken == 0 and self.finished >= self.after:
            self.taken = 1
            return True
        return False

    def serve(self) -> None:
        self.served += 1
        self.engine.calls.append(-1)  # where, among the engine's calls, the other work went


@BOTH_PROMPTS
def test_an_interjection_cuts_a_call_and_only_its_unfinished_rest_is_sent_again(options: BatchOptions) -> None:
    replies: list[str] = []

    def counted(conversation: Conversation) -> str:
        replies.append(reply_by_answer(conversation))
        return replies[-1]

    many = [Triple(id=f"t{n}", question=f"What is the capital of France? ({n})", answer="Paris.") for n in range(20)]
    alone = Judge(FakeEngine(counted)).grade(many, options)
    generated_alone, replies[:] = len(replies), []
    engine = FakeEngine(counted)
    first = TakesOnce(engine, after=5)

    def finished(index: int) -> None:
        first.finished += 1

    control = CallControl(on_finished=finished, poll_s=0.0)  # the engine asks for cancels before every conversation
    graded = Judge(engine).grade_unfinished([(t, options) for t in many], control, interject=first)

    assert first.served == 1
    cut = engine.calls.index(-1)
    assert engine.calls[cut + 1] == engine.calls[cut - 1] - 5  # the cut call's unfinished rest, sent again
    assert len(replies) == generated_alone  # no conversation generated twice
    assert [(j.id, j.status, j.score) for j in graded] == [(j.id, j.status, j.score) for j in alone]
