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
    assert "ETA ~" in written[-2]


def test_texts_and_eta() -> None:
    assert duration(42) == "42s" and duration(185) == "3m05s" and duration(3720) == "1h02m"
    assert progress_text(5, 31, False, 0, 3, 65, 130) == (
        "5/31 conversations (planned so far), 0/3 items · 1m05s · ETA ~2m10s"
    )
    assert progress_text(None, None, True, 1, 3) == "1/3 items"
    assert eta_s(0, 10, 1, 3, 5.0) is None
    # 10 planned for 1 item, 5 done in 10 s: 5 left of it and 20 of the two items not planned yet, at 0.5 a second.
    assert eta_s(5, 10, 1, 3, 10.0) == 50.0
