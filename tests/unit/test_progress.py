"""The judge's progress (juiz.judging.progress) on the FAKE engine: conversations planned wave by wave, done one by
one as the engine finishes them, items done only when all of theirs are."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from juiz.engines.base import CallControl, Completion, Conversation, GenerationRequest
from juiz.engines.fake import FakeEngine
from juiz.formats.readers import read_triples
from juiz.judging.judge import Judge
from juiz.judging.progress import REPLY_CHARS, Progress, ProgressSnapshot, WorkEstimate, eta_s
from schemas import BatchOptions, Triple
from tests.conftest import EXAMPLES
from tests.unit.test_judge import COT, RejectsLongAnswers, reply_by_answer, triples


class WaveRecorder(FakeEngine):
    """The FAKE engine, noting the progress at the start of each call (each wave) and after each conversation."""

    def __init__(self, progress: Progress) -> None:
        super().__init__(reply_by_answer)
        self.progress = progress
        self.at_call: list[ProgressSnapshot] = []

    def generate(
        self, conversations: Sequence[Conversation], request: GenerationRequest, control: CallControl | None = None
    ) -> list[Completion]:
        self.at_call.append(self.progress.snapshot())
        return super().generate(conversations, request, control)


def graded_with_progress(options: BatchOptions, items: list[Triple]) -> tuple[WaveRecorder, list[ProgressSnapshot]]:
    seen: list[ProgressSnapshot] = []
    progress = Progress(len(items), on_change=lambda p: seen.append(p.snapshot()))
    engine = WaveRecorder(progress)
    Judge(engine).grade(items, options, progress=progress)
    return engine, seen


def test_check_based_items_plan_their_reference_checks_once_the_references_are_written() -> None:
    """checks-17 (the default): wave 1 writes each item's reference; the checks asked of its points are planned only
    then, so `planned` grows and says it is planned so far until it is complete."""
    items = triples()[:2]
    engine, seen = graded_with_progress(BatchOptions(), items)
    references, *check_waves = engine.at_call
    assert engine.calls[0] == len(items)  # the references
    assert references.conversations_done == 0 and not references.planning_complete
    # Known before any reply: the references and every check that needs none.
    assert references.conversations_planned > len(items)
    first_checks = check_waves[0]
    assert first_checks.conversations_done == len(items)  # the references, and nothing else yet
    assert first_checks.planning_complete
    assert first_checks.conversations_planned > references.conversations_planned  # the points' checks, added
    final = seen[-1]
    assert final.conversations_planned == final.conversations_done == sum(engine.calls)
    assert (final.items_done, final.items) == (2, 2)


def test_done_moves_one_conversation_at_a_time_long_before_the_first_item_is_done() -> None:
    items = triples()[:2]
    _, seen = graded_with_progress(BatchOptions(), items)
    done = [s.conversations_done for s in seen]
    assert all(b - a in (0, 1) for a, b in itertools.pairwise(done))  # one by one, never backwards
    assert all(s.conversations_done <= s.conversations_planned for s in seen)
    first_item_done = next(n for n, s in enumerate(seen) if s.items_done)
    assert seen[first_item_done - 1].conversations_done >= 10  # ~14 conversations an item: many moves before one
    assert {s.items_done for s in seen[:first_item_done]} == {0}


def test_score_prompts_are_planned_whole_before_the_first_call() -> None:
    engine, seen = graded_with_progress(COT, triples())
    (at_call,) = engine.at_call
    assert (at_call.conversations_planned, at_call.conversations_done, at_call.planning_complete) == (3, 0, True)
    finished = [s for before, s in itertools.pairwise(seen) if s.conversations_done != before.conversations_done]
    assert [s.items_done for s in finished] == [1, 2, 3]


def test_a_batch_split_after_a_rejection_counts_each_conversation_once() -> None:
    items = [Triple(id=str(i), question="Q?", answer="LONG" if i == 5 else f"fine {i}") for i in range(8)]
    progress = Progress(len(items))
    Judge(RejectsLongAnswers()).grade(items, COT, progress=progress)
    final = progress.snapshot()
    assert (final.conversations_planned, final.conversations_done, final.items_done) == (8, 8, 8)


def test_a_snapshot_of_some_items_counts_theirs_only() -> None:
    progress = Progress(3)
    progress.plan([0, 0, 1, 2], close=[0, 1])
    progress.finish([0, 0, 2])
    assert progress.snapshot([0, 2]) == ProgressSnapshot(
        items=2, items_done=1, conversations_planned=3, conversations_done=3, planning_complete=False
    )
    assert progress.snapshot([0, 2]).line() == "3/3 conversations (planned so far), 1/2 items"


def test_tokens_move_within_the_references_wave_before_any_conversation_is_done() -> None:
    """checks-8: nothing finishes while the references are written (minutes on a CPU); their prompt tokens read and
    reply tokens written move the progress all the same, before the first conversation is done."""
    items = triples()[:2]
    engine, seen = graded_with_progress(BatchOptions(), items)
    before_any_done = [s for s in seen if s.conversations_done == 0]
    assert any(s.tokens_read > 0 for s in before_any_done)
    assert any(s.tokens_written > 0 for s in before_any_done)
    assert "tokens written" in before_any_done[-1].line() and before_any_done[-1].line().startswith("0/")
    written = [s.tokens_written for s in seen]
    assert all(a <= b for a, b in itertools.pairwise(written))  # never backwards
    # Every reply is at least one token; each check's ("Yes") exactly one.
    assert seen[-1].tokens_written >= sum(engine.calls)


def test_a_conversation_shared_by_items_counts_its_tokens_for_each() -> None:
    twins = [Triple(id=str(i), question="What is the capital of France?", answer="Paris.") for i in range(2)]
    progress = Progress(len(twins))
    engine = FakeEngine(reply_by_answer)
    Judge(engine).grade(twins, COT, progress=progress)
    assert engine.calls == [1]  # one conversation serves both
    first, second, both = progress.snapshot([0]), progress.snapshot([1]), progress.snapshot()
    assert first.tokens_written == second.tokens_written > 0 and first.tokens_read == second.tokens_read > 0
    assert both.tokens_written == 2 * first.tokens_written


def test_a_snapshot_and_its_line_carry_the_tokens() -> None:
    progress = Progress(3)
    progress.plan([0, 1, 2])
    progress.tokens([0], written=0, read=4710)
    progress.tokens([0, 2], written=12)
    assert progress.snapshot([0]) == ProgressSnapshot(
        items=1,
        items_done=0,
        conversations_planned=1,
        conversations_done=0,
        planning_complete=False,
        tokens_written=12,
        tokens_read=4710,
    )
    assert progress.snapshot().line() == (
        "0/3 conversations (planned so far), 0/3 items, 4,710 prompt tokens read, 24 tokens written"
    )


def test_a_reference_weighs_far_more_than_a_check_and_the_work_done_ends_equal_to_the_work_planned() -> None:
    """The ETA counts work, not conversations: the references' wave (a question and its context, a reply of up to
    160 tokens) is most of a check-based item's work, a check after it only its own question and one token. The
    seeds: three items with their contexts."""
    items = [t for path in sorted((EXAMPLES / "seeds").glob("00*.txt")) for t in read_triples(path)]
    engine, seen = graded_with_progress(BatchOptions(), items)
    references, first_checks = engine.at_call[0], engine.at_call[1]
    final = seen[-1]
    assert final.work_done == final.work_planned > 0
    # The references' wave done (3 of ~40 conversations) is most of the work planned by then.
    references_work = first_checks.work_done
    assert first_checks.conversations_done == len(items) and references_work > 0
    per_check = (final.work_done - references_work) / (final.conversations_done - len(items))
    assert references_work / len(items) > 10 * per_check
    # Planned before any reply: every reference and the checks that need none, with their work.
    assert references_work > references.work_planned / 2


def test_the_same_conversation_weighs_the_same_and_a_shared_prefix_is_not_counted_twice() -> None:
    work = WorkEstimate()
    system = {"role": "system", "content": "You check one property of an ANSWER. " * 20}
    item = {"role": "user", "content": "<context>" + "text of the context " * 100 + "</context>"}
    reference = [system, item]
    check = [system, {"role": "user", "content": item["content"] + "\nDoes the ANSWER answer the QUESTION?"}]
    first = work(reference, 160)
    assert first > len(item["content"]) + 160 * REPLY_CHARS - 1
    assert work(check, 1) < 60 + REPLY_CHARS  # only what it adds past the reference
    assert work(reference, 160) == first  # asked again (a finish after its plan): the same weight


def test_the_eta_counts_work_where_the_judge_weighed_it() -> None:
    # One reference of 9,000 done in 100 s and 30 checks of 100 left: ~33 s, not the 30 conversations' ~50 min.
    assert eta_s(1, 31, 1, 1, 100.0, work_done=9_000, work_planned=12_000) == 33.3
    assert eta_s(1, 31, 1, 1, 100.0) == 3000.0  # no work reported (an older worker): conversations


def test_a_conversations_tokens_count_toward_its_work_before_it_finishes_and_never_beyond_it() -> None:
    """A long reference moves the work done (and so the ETA) step by step; done, the call's work done is the work
    planned, not more."""
    items = [t for path in sorted((EXAMPLES / "seeds").glob("00*.txt")) for t in read_triples(path)][:1]
    seen: list[ProgressSnapshot] = []
    progress = Progress(len(items), on_change=lambda p: seen.append(p.snapshot()))
    Judge(StepwiseEngine()).grade(items, BatchOptions(), progress=progress)
    before_first = [s for s in seen if s.conversations_done == 0 and s.work_planned > 0]
    assert before_first[-1].work_done > 0  # the reference's prompt, read step by step
    assert seen[-1].work_done == seen[-1].work_planned


class StepwiseEngine(FakeEngine):
    """The FAKE engine, reporting each conversation's prompt as read in steps of 256 tokens before it finishes."""

    def __init__(self) -> None:
        super().__init__(reply_by_answer)

    def generate(
        self, conversations: Sequence[Conversation], request: GenerationRequest, control: CallControl | None = None
    ) -> list[Completion]:
        if control is not None and control.on_tokens is not None:
            for index in range(len(conversations)):
                for _ in range(4):
                    control.on_tokens(index, 0, 256)
                control.on_tokens(index, 3, 0)
        return super().generate(conversations, request, control)
