"""Which server slot computes which conversation, and in what order: a plan for a server whose slots each keep one
prompt's KV cache (llama.cpp).

Such a slot serves from cache only the prefix its new prompt shares with the one before it, so the prompt tokens a call
computes depend on what runs after what in each slot. The plan:

1. sorts the conversations by their text: prompts that share a prefix become neighbours, in the order of a walk of the
   prefix tree, so one slot going down the list computes each shared prefix once;
2. cuts the sorted list into runs wherever neighbours share less than `SHARED_FRACTION` of the shorter one's text (an
   item's checks, one check's worked examples shown for every item): a run belongs in one slot. Neighbours with the
   same system message are measured on what follows it: a system message shared by every prompt (a prompt whose
   worked examples sit in it) would otherwise join every item into one run, and one slot;
3. gives each run, the costliest first, to the slot that holds most of its prefix from the call before (an item's
   checks to the slot that wrote the item's reference: the slots share the cores, so a prefix computed again costs
   them all); a run no slot holds goes to the slot that finishes it soonest (what the slot has computed so far, plus
   the run's text less what it shares with the prompt the slot holds, or with a run it was given already, e.g. their
   common system message), so the slots are balanced by the tokens they will compute, not by the number of requests;
4. orders each slot's runs: the one sharing most with the slot's held prompt first, then the others as sorted.

Lengths are characters of the rendered messages, a stand-in for tokens (the plan needs no tokenizer); the server's
counts (`prompt_n`, `cache_n`) are what is measured. No conversation's text changes, only where and when it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from juiz.engines.base import Conversation

# Neighbours in the sorted list sharing less than this fraction of the shorter text start a new run: an item's checks
# share ~90% (system message, worked examples, the item), two items' checks only the system message and examples.
SHARED_FRACTION = 0.5


def prompt_text(conversation: Conversation) -> str:
    """The conversation as the chat template lays it out (role, then content), for prefix comparisons."""
    return "".join(f"\x00{message['role']}\x01{message['content']}" for message in conversation)


def shared_prefix(a: str, b: str) -> int:
    """Characters at the start of `a` and `b` that are the same."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    low, high = 0, n  # a[:low] == b[:low] and a[:high] != b[:high]
    while high - low > 1:
        mid = (low + high) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid
    return low


@dataclass
class _Run:
    rank: int  # its place in the sorted list
    positions: list[int]  # indices into the call's conversations, in sorted order
    first: str  # the run's first text
    cost: int  # characters the run computes when it starts in an empty slot


def _opening(text: str) -> int:
    """Characters of the prompt text's first message (its system message), role marker included."""
    end = text.find("\x00", 1)
    return end if end > 0 else 0


def _runs(texts: Sequence[str]) -> list[_Run]:
    order = sorted(range(len(texts)), key=lambda i: (texts[i], i))
    runs: list[_Run] = []
    previous: str | None = None
    for i in order:
        text = texts[i]
        shared = 0 if previous is None else shared_prefix(previous, text)
        # The same first message: measured on what follows it.
        base = _opening(text) if previous is not None and shared >= _opening(text) == _opening(previous) else 0
        if previous is None or shared - base < SHARED_FRACTION * (min(len(previous), len(text)) - base):
            runs.append(_Run(len(runs), [i], text, len(text)))
        else:
            runs[-1].positions.append(i)
            runs[-1].cost += len(text) - shared
        previous = text
    return runs


def plan_slots(texts: Sequence[str], held: Sequence[str]) -> list[list[int]]:
    """Each slot's conversations (indices into `texts`), in the order the slot should compute them. `held`: the prompt
    each slot holds now (the last one it computed, "" when none); there are `len(held)` slots."""
    slots = len(held)
    if slots < 1:
        raise ValueError("a plan needs at least one slot")
    runs = _runs(texts)
    load = [0] * slots
    taken: list[list[_Run]] = [[] for _ in range(slots)]
    # Costliest first (ties: the sorted order), each to the slot that would finish it first; but a run whose prefix a
    # slot holds from the call before (most of it: an item's context under the reference the judge wrote) goes there,
    # even if another slot would finish it sooner: the slots share the machine's cores, so what a slot recomputes
    # costs every slot, and only that slot can serve it.
    for run in sorted(runs, key=lambda r: -r.cost):
        finish = [load[s] + run.cost - _served(held[s], run, taken[s]) for s in range(slots)]
        reuse = [_reuse(held[s], run, taken[s]) for s in range(slots)]
        holders = [s for s in range(slots) if reuse[s] >= SHARED_FRACTION * run.cost and reuse[s] == max(reuse)]
        best = min(holders or range(slots), key=lambda s: (finish[s], load[s], s))
        taken[best].append(run)
        load[best] = finish[best]
    plan: list[list[int]] = []
    for s in range(slots):
        mine = sorted(taken[s], key=lambda r: r.rank)
        if mine and held[s]:
            opener = max(mine, key=lambda r: shared_prefix(held[s], r.first))
            mine = [opener, *(r for r in mine if r is not opener)]
        plan.append([i for run in mine for i in run.positions])
    return plan


def _reuse(held: str, run: _Run, taken: list[_Run]) -> int:
    """What the run's first prompt can take from the slot's held prompt: only if it would open the slot (a run
    taken before it would have replaced the held prompt) and it shares more with it than those taken."""
    shared = shared_prefix(held, run.first) if held else 0
    if any(shared_prefix(held, other.first) >= shared for other in taken):
        return 0
    return shared


def _served(held: str, run: _Run, taken: list[_Run]) -> int:
    """What of the run's first prompt a slot serves from cache: from its held prompt (`_reuse`), or from a run it was
    given already in this call (at least their common system message)."""
    return max([_reuse(held, run, taken), *(shared_prefix(other.first, run.first) for other in taken)])
