"""The progress line a person watches while items are graded: `juiz score`'s (local grading: `ProgressLine`) and
`juiz demo`'s or `juiz score --server`'s (a batch on the API: `BatchProgressPrinter`).

    grading: 5/31 conversations (planned so far), 0/3 items, 9,420 prompt tokens read, 96 tokens written · 1m05s

Conversations move within an item (a check-based item is ~14 of them, in waves), so the line moves long before the
first item is done; tokens move within a conversation (a reference: up to 160 tokens, tens of seconds on a CPU), so it
moves while none finishes; the clock and the ETA move with it, so a working judge never looks like a hung one.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from juiz.judging.progress import Progress, ProgressSnapshot, eta_s, tokens_text
from schemas import BatchView

# How often the line is looked at (the clock moves), and the longest a log waits for a new line.
TICK_S = 1.0
HEARTBEAT_S = 5.0


def duration(seconds: float) -> str:
    """`42s`, `3m05s`, `1h02m`."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def progress_text(
    conversations_done: int | None,
    conversations_planned: int | None,
    planning_complete: bool,
    items_done: int,
    items: int,
    elapsed_s: float | None = None,
    eta: float | None = None,
    tokens_written: int | None = None,
    tokens_read: int | None = None,
) -> str:
    """The line's text; conversations and tokens are left out where nothing reports them (an older server)."""
    parts = []
    if conversations_planned:
        so_far = "" if planning_complete else " (planned so far)"
        parts.append(f"{conversations_done or 0}/{conversations_planned} conversations{so_far}, ")
    parts.append(f"{items_done}/{items} items")
    parts.append(tokens_text(tokens_written, tokens_read))
    if elapsed_s is not None:
        parts.append(f" · {duration(elapsed_s)}")
    if eta is not None:
        parts.append(f" · ETA ~{duration(eta)}")
    return "".join(parts)


@dataclass
class _Totals:
    """What the chunks graded before the current one added."""

    done: int = 0
    planned: int = 0
    items_done: int = 0
    written: int = 0
    read: int = 0
    work_done: int = 0
    work_planned: int = 0


class ProgressLine:
    """`juiz score`'s line: one judge call (`Progress`) after another, over `items` items in all.

    On a terminal the line is redrawn in place every TICK_S (a thread of its own, as the judge's call holds the main
    thread); elsewhere (a log) a new line is written when the counts move, and at least every HEARTBEAT_S.
    """

    def __init__(
        self, items: int, out: TextIO = sys.stderr, clock: Callable[[], float] = time.monotonic, label: str = "grading"
    ) -> None:
        self.items, self.out, self.clock, self.label = items, out, clock, label
        self.started = clock()
        self._totals = _Totals()
        self._current: Progress | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._tty = out.isatty()
        self._last_counts: str | None = None
        self._last_written = -1.0
        self.lines: list[str] = []  # every line written, for tests and benchmarks

    def __enter__(self) -> ProgressLine:
        self._ticker = threading.Thread(target=self._tick, name="progress-line", daemon=True)
        self._ticker.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        self.draw(force=True)
        if self._tty:
            self.out.write("\n")
            self.out.flush()

    def call(self, n_items: int) -> Progress:
        """A `Progress` for the next judge call, over `n_items` of the items; the line follows it."""
        with self._lock:
            if self._current is not None:
                self._fold(self._current.snapshot())
            self._current = Progress(n_items, on_change=lambda _: self.draw())
            return self._current

    def _fold(self, snapshot: ProgressSnapshot) -> None:
        self._totals.done += snapshot.conversations_done
        self._totals.planned += snapshot.conversations_planned
        self._totals.items_done += snapshot.items_done
        self._totals.written += snapshot.tokens_written
        self._totals.read += snapshot.tokens_read
        self._totals.work_done += snapshot.work_done
        self._totals.work_planned += snapshot.work_planned

    def text(self) -> tuple[str, str]:
        """(the counts, the whole line)."""
        with self._lock:
            current = self._current.snapshot() if self._current is not None else None
            totals = _Totals(**vars(self._totals))
            seen_before = totals.items_done
        if current is not None:
            totals.done += current.conversations_done
            totals.planned += current.conversations_planned
            totals.items_done += current.items_done
            totals.written += current.tokens_written
            totals.read += current.tokens_read
            totals.work_done += current.work_done
            totals.work_planned += current.work_planned
        complete = current is None or (current.planning_complete and seen_before + current.items >= self.items)
        elapsed = self.clock() - self.started
        seen = seen_before + (current.items if current is not None else 0)
        over = complete and totals.items_done >= self.items
        eta = (
            None
            if over
            else eta_s(totals.done, totals.planned, seen, self.items, elapsed, totals.work_done, totals.work_planned)
        )
        figures = (totals.done, totals.planned, complete, totals.items_done, self.items)
        counts = progress_text(*figures, tokens_written=totals.written, tokens_read=totals.read)
        line = progress_text(*figures, elapsed, eta, tokens_written=totals.written, tokens_read=totals.read)
        return counts, f"{self.label}: {line}"

    def draw(self, force: bool = False) -> None:
        counts, line = self.text()
        now = self.clock()
        with self._lock:
            moved = counts != self._last_counts
            since = now - self._last_written
            # A terminal's line is redrawn up to ten times a second; a log gets a line a second at most when the
            # counts move (a GPU finishes hundreds of conversations a second), and one every HEARTBEAT_S regardless.
            due = since >= 0.1 if self._tty else (moved and since >= TICK_S) or since >= HEARTBEAT_S
            if not (force or due):
                return
            self._last_counts, self._last_written = counts, now
            self.lines.append(line)
            self.out.write(f"\r{line}\x1b[K" if self._tty else line + "\n")
            self.out.flush()

    def _tick(self) -> None:
        while not self._stop.wait(TICK_S):
            self.draw()


class BatchProgressPrinter:
    """A batch's progress as the API reports it (`juiz demo`, `juiz score --server`): a line per move of its counts,
    conversations or tokens (at most one a second), and one every HEARTBEAT_S while nothing moves, with the clock and
    the ETA: on a CPU an item is ~14 conversations, minutes of them, so the line moves long before the first item is
    done, and a long conversation's tokens move it while none finishes."""

    def __init__(self, out: TextIO, clock: Callable[[], float] = time.perf_counter) -> None:
        self.out, self.clock = out, clock
        self.started = clock()
        self.shown: str | None = None  # the figures last printed
        self.at = -HEARTBEAT_S  # when

    def __call__(self, view: BatchView) -> None:
        counts = view.counts
        figures = progress_text(
            view.conversations_done,
            view.conversations_planned,
            view.planning_complete,
            view.items_done,
            counts.total,
            tokens_written=view.tokens_written,
            tokens_read=view.tokens_read,
        )
        figures = f"  {view.status.value:9} {figures} "
        figures += f"(ok {counts.ok}, parse_error {counts.parse_error}, failed {counts.failed})"
        now = self.clock()
        over = view.status.value in ("done", "failed", "cancelled")
        if figures == self.shown and now - self.at < HEARTBEAT_S:
            return
        if figures != self.shown and now - self.at < TICK_S and not over:
            return  # a later poll shows it
        eta = f" · ETA ~{duration(view.eta_s)}" if view.eta_s is not None and not over else ""
        print(f"{figures}{eta}  [{now - self.started:.1f}s]", file=self.out, flush=True)
        self.shown, self.at = figures, now
