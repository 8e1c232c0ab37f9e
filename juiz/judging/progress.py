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

The judge writes a `Progress` from the thread that calls it; a reader (the worker's flusher, the CLI's bar) may read
`snapshot()` from another thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass


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


class Progress:
    """A judge call's progress, item by item; `on_change` hears every change (from the judge's thread)."""

    def __init__(self, n_items: int, on_change: Callable[[Progress], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._planned = [0] * n_items
        self._done = [0] * n_items
        self._written = [0] * n_items
        self._read = [0] * n_items
        # Items whose conversations are not all planned yet: every item until the judge has planned it.
        self._open = [True] * n_items
        self.on_change = on_change

    def plan(self, items: Iterable[int], close: Iterable[int] = ()) -> None:
        """One conversation more for each entry of `items` (an item may appear several times); `close`: items whose
        every conversation is planned now."""
        with self._lock:
            for item in items:
                self._planned[item] += 1
            for item in close:
                self._open[item] = False
        self._changed()

    def finish(self, items: Iterable[int]) -> None:
        """One conversation of each entry of `items` is done (a reply, an error or an abort)."""
        with self._lock:
            for item in items:
                self._done[item] += 1
        self._changed()

    def tokens(self, items: Iterable[int], written: int, read: int = 0) -> None:
        """Tokens of one conversation's work, new since its last report, for each item in `items` (those it serves)."""
        with self._lock:
            for item in items:
                self._written[item] += written
                self._read[item] += read
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
        return ProgressSnapshot(
            items=len(planned),
            items_done=sum(not o and d >= p for p, d, o in zip(planned, done, still_open, strict=True)),
            conversations_planned=sum(planned),
            conversations_done=sum(done),
            planning_complete=not any(still_open),
            tokens_written=written,
            tokens_read=read,
        )

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self)


def eta_s(done: int, planned: int, items_seen: int, items: int, elapsed_s: float) -> float | None:
    """Seconds left at the rate so far: the conversations planned and not done, plus those of the items not planned
    yet at the conversations per item planned so far. None before the first conversation is done. While planning is
    incomplete it is low: a check-based item's later checks are not counted until their reference is written."""
    if done <= 0 or elapsed_s <= 0:
        return None
    per_item = planned / items_seen if items_seen else 0.0
    left = max(0, planned - done) + per_item * max(0, items - items_seen)
    return round(left * elapsed_s / done, 1)
