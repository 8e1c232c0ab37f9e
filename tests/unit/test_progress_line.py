"""`juiz score`'s progress line on the FAKE engine, its clock driven by the engine (3 s a conversation): the line
moves with every conversation, long before the first item is done, and says how much is planned so far."""

from __future__ import annotations

import io

from juiz.engines.base import Conversation
from juiz.engines.fake import FakeEngine
from juiz.formats.progress_line import ProgressLine, duration, progress_text
from juiz.judging.judge import Judge
from juiz.judging.progress import eta_s
from schemas import BatchOptions
from tests.unit.test_judge import reply_by_answer, triples

CONVERSATION_S = 3.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_line_moves_with_each_conversation_before_the_first_item_is_done() -> None:
    clock = Clock()

    def reply(conversation: Conversation) -> str:
        clock.now += CONVERSATION_S  # each conversation takes 3 s of the line's clock
        return reply_by_answer(conversation)

    out = io.StringIO()  # not a terminal: a new line when the counts move
    items = triples()[:2]
    engine = FakeEngine(reply)
    with ProgressLine(len(items), out, clock=clock) as line:
        Judge(engine).grade(items, BatchOptions(), progress=line.call(len(items)))
    written = out.getvalue().splitlines()
    assert written == line.lines
    assert written[0].startswith("grading: 0/") and "(planned so far)" in written[0]
    before_first_item = [w for w in written if ", 0/2 items" in w]
    assert len(before_first_item) >= 10  # one line per conversation: ~14 an item
    assert written[-1].startswith("grading: ") and ", 2/2 items" in written[-1] and "planned so far" not in written[-1]
    assert len(set(written)) >= sum(engine.calls)  # a new line at every conversation: every 3 s of its clock
    # An ETA once a conversation is done (lines before it show the first one's tokens), none at the end.
    graded = [w for w in written if not w.startswith("grading: 0/")]
    assert all("ETA ~" in w for w in graded[:-2]) and "ETA" not in written[-1]


def test_the_line_moves_with_tokens_while_no_conversation_finishes() -> None:
    """One long conversation (a reference): its tokens are the only thing that moves, and the line moves with them."""
    clock = Clock()
    out = io.StringIO()
    with ProgressLine(1, out, clock=clock) as line:
        progress = line.call(1)
        progress.plan([0], close=[0])
        for _ in range(3):
            clock.now += 2.0
            progress.tokens([0], written=10, read=0)
        clock.now += 2.0
        progress.finish([0])
    written = out.getvalue().splitlines()
    assert [w.split(" · ")[0] for w in written[:4]] == [
        "grading: 0/1 conversations, 0/1 items",
        "grading: 0/1 conversations, 0/1 items, 10 tokens written",
        "grading: 0/1 conversations, 0/1 items, 20 tokens written",
        "grading: 0/1 conversations, 0/1 items, 30 tokens written",
    ]
    assert written[-1].startswith("grading: 1/1 conversations, 1/1 items, 30 tokens written")


def test_texts_and_eta() -> None:
    assert duration(42) == "42s" and duration(185) == "3m05s" and duration(3720) == "1h02m"
    assert progress_text(5, 31, False, 0, 3, 65, 130) == (
        "5/31 conversations (planned so far), 0/3 items · 1m05s · ETA ~2m10s"
    )
    assert progress_text(None, None, True, 1, 3) == "1/3 items"
    assert eta_s(0, 10, 1, 3, 5.0) is None
    # 10 planned for 1 item, 5 done in 10 s: 5 left of it and 20 of the two items not planned yet, at 0.5 a second.
    assert eta_s(5, 10, 1, 3, 10.0) == 50.0


def test_the_demo_prints_when_the_conversations_move_and_at_least_every_few_seconds() -> None:
    from datetime import UTC, datetime

    from juiz.formats.progress_line import BatchProgressPrinter
    from schemas import BatchView
    from service.views import batch_links

    clock = Clock()
    out = io.StringIO()
    show = BatchProgressPrinter(out, clock=clock)

    def view(status: str, done: int, planned: int, items_done: int = 0, written: int | None = None) -> BatchView:
        return BatchView(
            id="b",
            status=status,  # type: ignore[arg-type]
            counts={"total": 3, "done": items_done},  # type: ignore[arg-type]
            options={},  # type: ignore[arg-type]
            created_at=datetime.now(UTC),
            items_done=items_done,
            conversations_done=done,
            conversations_planned=planned,
            planning_complete=status == "done",
            tokens_written=written,
            eta_s=120.0 if done else None,
            links=batch_links("b"),
        )

    for at, shown in [(0.0, view("running", 0, 18)), (0.5, view("running", 0, 18)), (1.5, view("running", 1, 18))]:
        clock.now = at
        show(shown)
    clock.now = 7.0
    show(view("running", 1, 18))  # nothing moved for 5.5 s: a line all the same, the clock and the ETA in it
    clock.now = 8.5
    show(view("running", 1, 18, written=42))  # only the tokens moved: a line
    clock.now = 8.7
    show(view("done", 40, 40, 3, written=400))  # the end is printed at once
    lines = out.getvalue().splitlines()
    assert [line.split("  [")[-1] for line in lines] == ["0.0s]", "1.5s]", "7.0s]", "8.5s]", "8.7s]"]
    assert "1/18 conversations (planned so far), 0/3 items" in lines[1] and "ETA ~2m00s" in lines[1]
    assert "1/18 conversations (planned so far), 0/3 items, 42 tokens written (ok 0" in lines[3]
    assert "done      40/40 conversations, 3/3 items, 400 tokens written" in lines[4] and "ETA" not in lines[4]
