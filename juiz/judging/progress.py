"""How far one judge call is: per item, the conversations planned so far and those done.

An item's metric is one conversation (CoT, fast) or many (a check-based prompt: its references, then its checks, in
waves). The judge plans what it can before the first engine call; a check asked of a reference's points is planned
only once that reference is written, so `conversations_planned` can grow during a call and `planning_complete` says
when it no longer will. A conversation shared by several items (the same segment of the same question) counts for
each. Every engine reports each conversation as it finishes (`CallControl.on_finished`), so the counts move within a
call, long before its first item is done; and the tokens of each conversation as it is worked on
(`CallControl.on_tokens`: reply tokens written, prompt tokens read), so they move within one long conversation too
(a check-based item's reference: one reply of up to 160 tokens after a prompt of thousands, tens of seconds on a CPU).
Tokens count for each item a shared conversation serves, as its conversations do; work an engine repeats (a call cut
for other work and sent again) counts again.

Conversations differ in cost by two orders of magnitude: a reference computes a question and its context (thousands
of tokens) and writes up to 160, a check after it computes its own question and one token. So the ETA is not counted
in conversations but in *work*: each conversation's characters past the longest prefix it shares with one planned
before it in the call (what a prefix cache leaves to compute), plus its reply allowance at REPLY_CHARS a token
(`WorkEstimate`). It is an estimate of what the engine computes, not a measure; what matters is that a reference and
a check weigh what they cost relative to each other. The tokens a conversation reports while it runs count toward its
work (PROMPT_CHARS a prompt token, REPLY_CHARS a reply token, up to its weight) and its finish adds the rest, so the
ETA has a rate within the first long conversation, not only after it.

The judge writes a `Progress` from the thread that calls it; a reader (the worker's flusher, the CLI's bar) may read
`snapshot()` from another thread.
"""

from __future__ import annotations

import bisect
import json
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from juiz.engines.base import Conversation

# A reply token weighs as much as this many prompt characters: on a 2-core CPU the 1.5B judge wrote a token in the time
# it read ~4 prompt tokens (~16 characters). Only the ETA reads it.
REPLY_CHARS = 16
# A prompt token read is about this many characters of a conversation's text: a conversation's tokens reported while
# it runs count as that much of its work done, up to its whole weight.
PROMPT_CHARS = 4


@dataclass(frozen=True)
class ProgressSnapshot:
    """A call's (or some of its items') progress at one moment."""

    items: int
    items_done: int
    conversations_planned: int  # so far: see planning_complete
    conversations_done: int
    planning_complete: bool  # no item's conversations are still to be planned
    tokens_written: int = 0  # reply tokens the engine wrote so far, finished conversations or not
    tokens_read: int = 0  # prompt tokens it computed so far (0 where the engine does not say)
    work_planned: int = 0  # the planned conversations' estimated work (`WorkEstimate`), so far
    work_done: int = 0  # that of the conversations done, and what the tokens read so far credit to those running

    def line(self) -> str:
        """`12/31 conversations (planned so far), 0/3 items, 4,710 prompt tokens read, 42 tokens written`: what a
        progress line shows."""
        so_far = "" if self.planning_complete else " (planned so far)"
        return (
            f"{self.conversations_done}/{self.conversations_planned} conversations{so_far}, "
            f"{self.items_done}/{self.items} items{tokens_text(self.tokens_written, self.tokens_read)}"
        )


def tokens_text(written: int | None, read: int | None) -> str:
    """`, 4,710 prompt tokens read, 42 tokens written` (each part only once there is some): the work within
    conversations, which moves while none finishes."""
    parts = []
    if read:
        parts.append(f", {read:,} prompt tokens read")
    if written:
        parts.append(f", {written:,} token{'' if written == 1 else 's'} written")
    return "".join(parts)


class WorkEstimate:
    """The work a conversation costs an engine with a prefix cache, in characters: those past the longest prefix it
    shares with any conversation estimated before it, plus `max_tokens` × REPLY_CHARS. The same conversation is
    estimated once (asked again, it weighs the same), so a plan and its finish agree."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: list[str] = []  # sorted: the longest shared prefix is with a neighbour
        self._work: dict[str, int] = {}

    def __call__(self, conversation: Conversation, max_tokens: int) -> int:
        text = json.dumps(conversation, ensure_ascii=False)
        with self._lock:
            known = self._work.get(text)
            if known is not None:
                return known
            at = bisect.bisect_left(self._seen, text)
            shared = max(
                (_shared_length(text, self._seen[n]) for n in (at - 1, at) if 0 <= n < len(self._seen)), default=0
            )
            self._seen.insert(at, text)
            work = self._work[text] = len(text) - shared + max_tokens * REPLY_CHARS
        return work


def _shared_length(a: str, b: str) -> int:
    """The length of the longest common prefix of `a` and `b`, by bisection over slice comparisons (done in C: a
    call's conversations are thousands of characters each, and a character loop in Python would cost seconds)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


class Progress:
    """A judge call's progress, item by item; `on_change` hears every change (from the judge's thread)."""

    def __init__(self, n_items: int, on_change: Callable[[Progress], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._planned = [0] * n_items
        self._done = [0] * n_items
        self._written = [0] * n_items
        self._read = [0] * n_items
        self._work_planned = [0] * n_items
        self._work_done = [0] * n_items
        # Items whose conversations are not all planned yet: every item until the judge has planned it.
        self._open = [True] * n_items
        self.on_change = on_change
        self.work = WorkEstimate()  # the judge weighs the call's conversations with it

    def plan(self, items: Iterable[int], close: Iterable[int] = (), work: Iterable[int] | None = None) -> None:
        """One conversation more for each entry of `items` (an item may appear several times), of the `work` at the
        same place (`WorkEstimate`; none: not estimated); `close`: items whose every conversation is planned now."""
        with self._lock:
            for item, weight in _weighed(items, work):
                self._planned[item] += 1
                self._work_planned[item] += weight
            for item in close:
                self._open[item] = False
        self._changed()

    def finish(self, items: Iterable[int], work: Iterable[int] | None = None) -> None:
        """One conversation of each entry of `items` is done (a reply, an error or an abort), of the `work` at the
        same place (as planned)."""
        with self._lock:
            for item, weight in _weighed(items, work):
                self._done[item] += 1
                self._work_done[item] += weight
        self._changed()

    def tokens(self, items: Iterable[int], written: int, read: int = 0, work: int = 0) -> None:
        """Tokens of one conversation's work, new since its last report, for each item in `items` (those it serves),
        and the share of its weight they are (`work`: the judge credits it ahead of the conversation's finish, which
        then adds only the rest)."""
        with self._lock:
            for item in items:
                self._written[item] += written
                self._read[item] += read
                self._work_done[item] += work
        self._changed()

    def snapshot(self, positions: Sequence[int] | None = None) -> ProgressSnapshot:
        """The whole call's progress, or that of the items at `positions` (e.g. one batch's chunk of the call)."""
        with self._lock:
            chosen = range(len(self._planned)) if positions is None else positions
            planned = [self._planned[i] for i in chosen]
            done = [self._done[i] for i in chosen]
            still_open = [self._open[i] for i in chosen]
            written = sum(self._written[i] for i in chosen)
            read = sum(self._read[i] for i in chosen)
            work_planned = sum(self._work_planned[i] for i in chosen)
            work_done = sum(self._work_done[i] for i in chosen)
        return ProgressSnapshot(
            items=len(planned),
            items_done=sum(not o and d >= p for p, d, o in zip(planned, done, still_open, strict=True)),
            conversations_planned=sum(planned),
            conversations_done=sum(done),
            planning_complete=not any(still_open),
            tokens_written=written,
            tokens_read=read,
            work_planned=work_planned,
            work_done=work_done,
        )

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self)


def _weighed(items: Iterable[int], work: Iterable[int] | None) -> Iterable[tuple[int, int]]:
    if work is None:
        return ((item, 0) for item in items)
    return zip(items, work, strict=True)


def eta_s(
    done: int, planned: int, items_seen: int, items: int, elapsed_s: float, work_done: int = 0, work_planned: int = 0
) -> float | None:
    """Seconds left at the rate so far: the work planned and not done, plus that of the items not planned yet at the
    work per item planned so far. Work is the conversations' estimated work where the judge weighed them
    (`WorkEstimate`), else their count. None before the first conversation is done. While planning is incomplete it
    is low: a check-based item's later checks are not counted until their reference is written."""
    if work_done > 0 and work_planned > 0:
        done, planned = work_done, work_planned
    if done <= 0 or elapsed_s <= 0:
        return None
    per_item = planned / items_seen if items_seen else 0.0
    left = max(0, planned - done) + per_item * max(0, items - items_seen)
    return round(left * elapsed_s / done, 1)
