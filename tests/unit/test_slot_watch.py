"""The llama.cpp engine's hang watch: busy slots whose counters stand still for the stall time abort the call and end
the engine; moving counters, idle slots or a server that can't answer never do."""

from __future__ import annotations

from typing import Any

from juiz.engines.base import CallControl
from juiz.engines.llamacpp_engine import SlotWatch


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def slot(busy: bool, read: int, task: int = 7, decoded: int = 0) -> dict[str, Any]:
    return {
        "id": 0,
        "id_task": task,
        "is_processing": busy,
        "n_prompt_tokens": 1373,
        "n_prompt_tokens_processed": read,
        "next_token": [{"n_decoded": decoded}],
    }


def watch(clock: Clock) -> SlotWatch:
    return SlotWatch(lambda: [], stall_s=300, every_s=15, clock=clock)


def test_a_busy_slot_whose_counters_stand_still_for_the_stall_time_is_a_hang() -> None:
    clock = Clock()
    w = watch(clock)
    for clock.now in (0, 150, 299):
        w.observe([slot(busy=True, read=256)])
        assert w.stalled is None
    clock.now = 300
    w.observe([slot(busy=True, read=256)])
    assert w.stalled is not None and "slot 0 task 7 at 256 of 1373 prompt tokens" in w.stalled


def test_counters_that_move_or_idle_slots_are_never_a_hang() -> None:
    clock = Clock()
    moving, idle = watch(clock), watch(clock)
    for step in range(100):
        clock.now = step * 15.0
        moving.observe([slot(busy=True, read=256, decoded=step)])
        idle.observe([slot(busy=False, read=0)])
    assert moving.stalled is None and idle.stalled is None


def test_once_hung_every_request_of_the_call_is_aborted_and_before_only_those_asked() -> None:
    clock = Clock()
    w = watch(clock)
    control = w.control(CallControl(cancelled=lambda: [1]), size=3)
    assert control.cancelled is not None
    assert list(control.cancelled()) == [1]
    w.observe([slot(busy=True, read=0)])
    clock.now = 301
    w.observe([slot(busy=True, read=0)])
    assert list(control.cancelled()) == [0, 1, 2]
    assert list(w.control(None, size=2).cancelled()) == [0, 1]  # type: ignore[misc]
