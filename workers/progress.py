"""A job's engine call, as the API sees it while it runs: each chunk's conversations planned and done, and the tokens
its conversations wrote and read, written to the batch (juiz.store.progress) from a thread of the worker's own, at
most once a `progress_interval_s` and only when they moved, so the engine's thread never waits on Redis and a fast
engine costs Redis one write a second per worker.

    call starts → `start()` (the flusher thread) → the judge updates `progress` per conversation → `finish()` (the
    thread stops; the final figures written) → results stored → `fold()` (the chunks' figures into the batch's sums)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from juiz.judging.progress import Progress
from juiz.runtime.retry import REDIS_ERRORS
from juiz.store import ChunkProgress, ChunkRef, Store
from juiz.store.retrying import retrying

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Chunk:
    ref: ChunkRef
    settled: int  # its items that need no engine (cached, or failed before the call)
    graded: list[int]  # its items' positions in the judge's call


class CallProgress:
    """One engine call's progress, chunk by chunk. `chunk_of[i]` is the chunk of the call's item i (the worker's
    `flat` order); `to_grade` the positions of those the judge grades, in the judge's order."""

    def __init__(
        self,
        store: Store,
        interval_s: float,
        chunk_of: Sequence[ChunkRef],
        to_grade: Sequence[int],
        redis_retry_s: float,
    ) -> None:
        self.store, self.interval_s, self.redis_retry_s = store, interval_s, redis_retry_s
        self._moved = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.progress = Progress(len(to_grade), on_change=lambda _: self._moved.set())
        position_in_call = {position: n for n, position in enumerate(to_grade)}
        chunks: dict[ChunkRef, tuple[int, list[int]]] = {}
        for position, ref in enumerate(chunk_of):
            settled, graded = chunks.setdefault(ref, (0, []))
            if position in position_in_call:
                graded.append(position_in_call[position])
            else:
                chunks[ref] = (settled + 1, graded)
        self.chunks = [_Chunk(ref, settled, graded) for ref, (settled, graded) in chunks.items()]

    def figures(self) -> dict[str, dict[int, ChunkProgress]]:
        """Each chunk's figures now, by batch."""
        out: dict[str, dict[int, ChunkProgress]] = {}
        for chunk in self.chunks:
            now = self.progress.snapshot(chunk.graded)
            out.setdefault(chunk.ref.batch_id, {})[chunk.ref.chunk_no] = ChunkProgress(
                planned=now.conversations_planned,
                done=now.conversations_done,
                items_done=chunk.settled + now.items_done,
                items_seen=chunk.settled + now.items,
                open=not now.planning_complete,
                written=now.tokens_written,
                read=now.tokens_read,
                work_planned=now.work_planned,
                work_done=now.work_done,
            )
        return out

    def start(self) -> None:
        self._moved.set()  # the call's items are seen: written at once
        self._thread = threading.Thread(target=self._flush_every_interval, name="progress-writer", daemon=True)
        self._thread.start()

    def _flush_every_interval(self) -> None:
        while not self._stop.is_set():
            if self._moved.is_set():
                self._moved.clear()
                try:
                    self.store.write_progress(self.figures())
                except REDIS_ERRORS as exc:  # progress is a view: the call goes on, the next write catches up
                    log.warning("could not write the call's progress: %s", exc)
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def finish(self) -> None:
        """Stop the thread and write the final figures (before the results are stored: a batch that is over refuses
        progress writes)."""
        self.stop()
        retrying(self.store, self.redis_retry_s).write_progress(self.figures())

    def fold(self) -> None:
        """After the results are stored: the chunks' figures into their batches' sums."""
        by_batch: dict[str, list[int]] = {}
        for chunk in self.chunks:
            by_batch.setdefault(chunk.ref.batch_id, []).append(chunk.ref.chunk_no)
        retrying(self.store, self.redis_retry_s).fold_progress(by_batch)
