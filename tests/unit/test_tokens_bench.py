"""bench.tokens' prefix-cache model and figures on hand-made token sequences (no tokenizer, no model)."""

from __future__ import annotations

from bench.tokens import Sent, cache, summarise


def sent(wave: int, tokens: list[int], kind: str = "once", decode: int = 1) -> Sent:
    return Sent(wave, "i", "answer_relevance", kind, kind, tuple(tokens), decode)


def test_cached_tokens_are_the_longest_prefix_shared_with_any_earlier_conversation() -> None:
    rows = [
        sent(0, [1, 2, 3, 4]),
        sent(0, [1, 2, 9, 9]),  # shares 2 with the first
        sent(0, [1, 2, 3, 5]),  # shares 3 with the first, though the second came in between
        sent(1, [1, 2, 3, 4, 6]),  # a new call: nothing under the per-call model, 4 under the whole-run one
        sent(1, [1, 2, 3, 4]),  # identical to an earlier one: its last token is still computed
    ]
    cache(rows)
    assert [r.cached_wave for r in rows] == [0, 2, 3, 0, 3]
    assert [r.cached_run for r in rows] == [0, 2, 3, 4, 3]
    # two slots, each keeping only its last prompt: the second goes to the slot sharing most and replaces the first
    # there, so the third finds only [1, 2] of its prefix
    assert [r.cached_slots for r in rows] == [0, 2, 2, 3, 3]


def test_one_slot_serves_only_the_prompt_before() -> None:
    rows = [sent(0, [1, 2, 3, 4]), sent(0, [5, 6]), sent(0, [1, 2, 3, 9])]
    cache(rows, slots=1)
    assert [r.cached_slots for r in rows] == [0, 0, 0]


def test_figures_per_item_per_kind_and_per_call() -> None:
    rows = [sent(0, [7] * 40, "reference", decode=30), sent(1, [1] * 40), sent(1, [1] * 39 + [2], "per_point")]
    cache(rows)
    report = summarise(rows, items=2)
    total = report["total"]
    assert total["conversations_per_item"] == 1.5 and total["prompt_tokens_per_item"] == 60
    assert total["computed_tokens_per_item_wave"] == (40 + 40 + 1) / 2
    assert total["computed_tokens_per_item_wave_block32"] == (40 + 40 + 8) / 2  # whole 32-token blocks only
    assert total["decode_tokens_per_item"] == 16
    assert report["by_kind"]["per_point"]["cache_hit_rate_wave"] == round(39 / 40, 4)
    assert [w["conversations"] for w in report["waves"]] == [1, 2] and report["waves"][0]["longest_decode"] == 30


def test_the_planned_model_serves_each_slot_the_prompt_before_it_in_the_engines_plan() -> None:
    def with_text(tokens: list[int], text: str) -> Sent:
        row = sent(0, tokens)
        row.text = text
        return row

    # Sent interleaved; the plan puts the two sharing a prefix one after the other in one slot.
    rows = [with_text([1, 2, 3, 4], "shared X"), with_text([5, 6], "other"), with_text([1, 2, 3, 9], "shared Y")]
    cache(rows, slots=1)
    assert [r.cached_slots for r in rows] == [0, 0, 0]
    assert [r.cached_planned for r in rows] == [0, 0, 3]
