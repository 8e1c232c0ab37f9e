"""The slot plan for a server that keeps one prompt's cache per slot (juiz.engines.slots), and how an OpenAI-compatible
engine queues a call through it (lanes: order kept, depth bounded, llama.cpp's `id_slot`), against a FAKE server."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import httpx
import pytest

from juiz.engines.base import Conversation
from juiz.engines.llamacpp_engine import LlamaCppEngine
from juiz.engines.openai_server import OpenAIEngine
from juiz.engines.slots import plan_slots, prompt_text, shared_prefix
from juiz.judging.plan import CHECK_REQUEST
from juiz.runtime.errors import EngineError

SYSTEM = "You grade answers. " + "Worked example. " * 5


def item(name: str) -> str:
    """An item's prefix: a system message and worked examples shared by every item, then the item, longer."""
    return SYSTEM + f"Question and answer of item {name}. " * 20


def check(name: str, k: int) -> str:
    return item(name) + f"Check {k}?"


def computed(plan: list[list[int]], texts: Sequence[str], held: Sequence[str] = ()) -> int:
    """Characters a plan computes when each slot serves from cache the prefix shared with its previous prompt."""
    total = 0
    for s, lane in enumerate(plan):
        previous = held[s] if s < len(held) else ""
        for i in lane:
            total += len(texts[i]) - shared_prefix(previous, texts[i])
            previous = texts[i]
    return total


@pytest.mark.parametrize(("a", "b", "n"), [("", "x", 0), ("abc", "abd", 2), ("abc", "abc", 3), ("ab", "abc", 2)])
def test_shared_prefix_counts_the_same_leading_characters(a: str, b: str, n: int) -> None:
    assert shared_prefix(a, b) == n == shared_prefix(b, a)


def test_each_items_checks_go_to_one_slot_and_the_two_items_to_different_slots() -> None:
    # As the judge sends them: items interleaved (each prefix's first check at the head), then the rest.
    texts = [check("A", 0), check("B", 0), *(check(n, k) for n in "AB" for k in range(1, 6))]
    plan = plan_slots(texts, ["", ""])
    slot_of = {texts[i]: s for s, lane in enumerate(plan) for i in lane}
    assert {slot_of[check("A", k)] for k in range(6)} != {slot_of[check("B", k)] for k in range(6)}
    assert len({slot_of[check("A", k)] for k in range(6)}) == 1
    assert sorted(i for lane in plan for i in lane) == list(range(len(texts)))
    # Each item's prefix once, plus each check's own words: what the interleaved order in one slot pays twice over.
    assert computed(plan, texts) < computed([list(range(len(texts)))], texts)
    own_words = len(check("A", 1)) - shared_prefix(check("A", 0), check("A", 1))
    assert computed(plan, texts) == 2 * len(check("A", 0)) + 10 * own_words


def test_a_long_system_message_shared_by_every_prompt_does_not_join_the_items_into_one_slot() -> None:
    # Worked examples in the system message: longer than any item, the same for every prompt.
    def conversation(name: str, k: int) -> str:
        return prompt_text(
            [
                {"role": "system", "content": "Worked example. " * 200},
                {"role": "user", "content": f"Item {name}. " * 40 + f"Check {k}?"},
            ]
        )

    texts = [conversation(n, k) for n in "AB" for k in range(4)]
    plan = plan_slots(texts, ["", ""])
    assert sorted(plan) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_slots_are_balanced_by_what_they_compute_not_by_requests() -> None:
    # One long item with many checks, and three short ones with one check each.
    long_item = [item("L") * 3 + f"Check {k}?" for k in range(8)]
    short = [f"Other prompt {n}. " * 30 for n in range(3)]
    texts = long_item + short
    plan = plan_slots(texts, ["", ""])
    lane_of_long = {s for s, lane in enumerate(plan) for i in lane if i < 8}
    assert len(lane_of_long) == 1
    [other] = {0, 1} - lane_of_long
    assert sorted(plan[other]) == [8, 9, 10]


def test_a_slot_that_holds_an_items_prompt_from_the_call_before_gets_that_items_checks_first() -> None:
    reference = {n: item(n) + "Write a reference." for n in "AB"}
    texts = [check(n, k) for n in "AB" for k in range(4)]
    plan = plan_slots(texts, [reference["B"], reference["A"]])
    assert {texts[i][: len(item("B"))] for i in plan[0]} == {item("B")}
    assert {texts[i][: len(item("A"))] for i in plan[1]} == {item("A")}


def test_an_items_checks_go_to_the_slot_holding_its_reference_even_when_another_slot_is_less_loaded() -> None:
    # Three references written on two slots: the first slot wrote A's then C's, and holds C's; the second holds B's.
    reference = {n: item(n) + "Write a reference." for n in "ABC"}
    texts = [check(n, k) for n in "ABC" for k in range(4)]
    held = [reference["C"], reference["B"]]
    plan = plan_slots(texts, held)
    slot_of = {texts[i][: len(item("A"))]: s for s, lane in enumerate(plan) for i in lane}
    assert slot_of[item("C")] == 0 and slot_of[item("B")] == 1
    # B's and C's prefixes served from their references: less is computed than one item's prefix and every check's own
    # words.
    assert computed(plan, texts, held) < len(item("A")) + len(texts) * len("Check 0?")


def test_one_slot_takes_everything_in_prefix_order_and_no_slot_is_an_error() -> None:
    texts = [check("B", 1), check("A", 1), check("B", 0), check("A", 0)]
    assert plan_slots(texts, [""]) == [[3, 1, 2, 0]]
    assert plan_slots([], ["", ""]) == [[], []]
    with pytest.raises(ValueError, match="at least one slot"):
        plan_slots(texts, [])


def test_the_prompt_text_keeps_roles_apart_and_in_order() -> None:
    one = prompt_text([{"role": "system", "content": "ab"}, {"role": "user", "content": "c"}])
    other = prompt_text([{"role": "system", "content": "a"}, {"role": "user", "content": "bc"}])
    assert one != other and one.index("ab") < one.index("c")


# --- lanes through an engine ----------------------------------------------------------------------------------------


def _conversation(text: str) -> Conversation:
    return [{"role": "user", "content": text}]


class Recorder:
    """A FAKE llama.cpp server (async transport): records each request's slot in arrival order and how many of a
    slot's requests were in flight at once; every request yields to the loop a few times before it answers."""

    def __init__(self) -> None:
        self.arrivals: dict[int, list[str]] = defaultdict(list)
        self.in_flight: dict[int, int] = defaultdict(int)
        self.most_in_flight: dict[int, int] = defaultdict(int)

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "judge", "owned_by": "llamacpp"}]})
        body = json.loads(request.content)
        slot = int(body.get("id_slot", -1))
        self.arrivals[slot].append(body["messages"][-1]["content"])
        self.in_flight[slot] += 1
        self.most_in_flight[slot] = max(self.most_in_flight[slot], self.in_flight[slot])
        for _ in range(5):
            await asyncio.sleep(0)
        self.in_flight[slot] -= 1
        choice = {"index": 0, "message": {"role": "assistant", "content": "Yes"}, "finish_reason": "stop"}
        return httpx.Response(200, json={"choices": [choice], "usage": {"prompt_tokens": 1}})


class PlannedEngine(OpenAIEngine):
    """An engine with a fixed lane plan, pinned as llama.cpp pins it."""

    def __init__(self, plan: list[list[int]], depth: int, transport: httpx.AsyncBaseTransport) -> None:
        self.plan, self.lane_depth = plan, depth
        super().__init__("http://127.0.0.1:1/v1", "judge", transport=transport, max_concurrency=8)

    def lanes(self, conversations: Sequence[Conversation]) -> list[list[int]] | None:
        return self.plan

    in_lane = LlamaCppEngine.in_lane


@pytest.mark.parametrize("depth", [1, 2])
def test_a_lanes_requests_reach_its_slot_in_the_planned_order_at_most_depth_at_once(depth: int) -> None:
    server = Recorder()
    engine = PlannedEngine([[4, 0, 2], [1, 3, 5]], depth, httpx.MockTransport(server))
    try:
        replies = engine.generate([_conversation(f"c{i}") for i in range(6)], CHECK_REQUEST)
    finally:
        engine.close()
    assert [r.text for r in replies] == ["Yes"] * 6  # in the call's order, whatever the lanes
    if depth == 1:
        assert server.arrivals == {0: ["c4", "c0", "c2"], 1: ["c1", "c3", "c5"]}
    else:
        assert {s: sorted(a) for s, a in server.arrivals.items()} == {0: ["c0", "c2", "c4"], 1: ["c1", "c3", "c5"]}
        assert server.arrivals[0][-1] == "c2" and server.arrivals[1][-1] == "c5"
    assert max(server.most_in_flight.values()) == depth


def test_a_plan_that_drops_or_repeats_a_conversation_is_refused() -> None:
    engine = PlannedEngine([[0, 0], [1]], 1, httpx.MockTransport(Recorder()))
    try:
        with pytest.raises(EngineError, match="exactly once"):
            engine.generate([_conversation(f"c{i}") for i in range(3)], CHECK_REQUEST)
    finally:
        engine.close()


def test_llama_cpp_plans_each_call_from_what_its_slots_hold_after_the_last() -> None:
    engine: Any = object.__new__(LlamaCppEngine)  # the planning alone: no server
    engine._held = ["", ""]
    references = [_conversation(item(n) + "Write a reference.") for n in "AB"]
    first = engine.lanes(references)
    assert sorted(len(lane) for lane in first) == [1, 1]
    slot_of_a = next(s for s, lane in enumerate(first) if 0 in lane)
    checks = [_conversation(check(n, k)) for k in range(3) for n in "BA"]
    second = engine.lanes(checks)
    assert {checks[i][0]["content"][: len(item("A"))] for i in second[slot_of_a]} == {item("A")}
    assert engine.in_lane({"model": "judge"}, 1) == {"model": "judge", "id_slot": 1}
