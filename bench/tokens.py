"""Where the default judge's prompt tokens go, per item, without a model: `python -m bench.tokens`.

The judge plans and sends the dev split's conversations to a FAKE engine that records every engine call (one call is
one wave: the judge waits for it before sending the next), in the order sent. The references are the ones the real
judge wrote on the same split (bench/results/judgements/<split>_checks-8.jsonl.gz), so the per-point checks are as
many as in a real grading. Every conversation is tokenised with the judge's own chat template and tokenizer
(transformers, from the model folder juiz pulls), and attributed to its metric and check.

What a prefix cache serves is modelled, not measured: a conversation's cached tokens are its longest common prefix
with any conversation sent before it —
- `wave`: earlier in the same engine call (a cache that keeps nothing between the judge's calls);
- `run`: earlier in the whole grading, any call (a cache large enough to keep everything the grading computed);
- `slots`: the last prompt of one of SLOTS slots, the one sharing the longest prefix (else the least recently used),
  as llama.cpp's server keeps one prompt's cache per slot and picks the most similar slot;
- `planned`: the last prompt of the slot juiz's llama.cpp engine pins the conversation to, each call planned over
  SLOTS slots by juiz.engines.slots (each slot's conversations one after another, in the plan's order).
vLLM's automatic prefix caching serves between the first two: vLLM keeps blocks until they are
evicted (its CPU KV cache holds ~150k tokens of this model at 4 GiB), and caches whole 32-token blocks only on a CPU
(`*_block32`); requests scheduled in the same step compute a shared prefix each, which neither model counts.
Computed tokens = prompt tokens − cached tokens. Decode tokens: the references' replies (tokens of the reference the
real judge wrote, capped at the prompt's max) and one token per check.

`--before REF` (repeatable) also measures the judge as it was at a git commit (its code exported to a temporary
folder), so one run writes every side with the same items, references and tokenizer, and which conversations each
side sends that the other doesn't (a conversation both send has the same text, so the same reply on the same engine).
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# vLLM caches whole KV blocks only: juiz's CPU block size (juiz.engines.vllm_engine.CPU_BLOCK_SIZE).
BLOCK = 32
SLOTS = 2  # llama.cpp's parallel slots on this 2-core machine
MODEL = Path.home() / ".cache" / "juiz" / "models" / "qwen2.5-coder-1.5b-instruct"


@dataclass
class Sent:
    """One conversation as sent: the engine call (wave) it went in, what it is, its tokens."""

    wave: int
    item: str
    metric: str
    check: str
    kind: str
    tokens: tuple[int, ...]
    decode: int
    cached_wave: int = 0
    cached_run: int = 0
    cached_slots: int = 0
    cached_planned: int = 0
    text: str = ""  # juiz.engines.slots.prompt_text of the conversation: what the engine's plan compares


@dataclass
class _Prefixes:
    """Earlier token sequences, sorted: the longest common prefix with any of them is with a sorted neighbour."""

    seen: list[tuple[int, ...]] = field(default_factory=list)

    def longest(self, tokens: tuple[int, ...]) -> int:
        at = bisect.bisect_left(self.seen, tokens)
        best = 0
        for neighbour in self.seen[max(0, at - 1) : at + 1]:
            n = 0
            for a, b in zip(neighbour, tokens, strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        return best

    def add(self, tokens: tuple[int, ...]) -> None:
        bisect.insort(self.seen, tokens)


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def cache(sent: Sequence[Sent], slots: int = SLOTS) -> None:
    """Each conversation's cached tokens under the three models (module docstring); at least its last token is
    computed."""
    run = _Prefixes()
    waves: dict[int, _Prefixes] = defaultdict(_Prefixes)
    last: list[tuple[int, ...]] = [() for _ in range(slots)]
    used = list(range(slots))  # least recently used first
    for s in sent:
        top = len(s.tokens) - 1
        s.cached_wave = min(waves[s.wave].longest(s.tokens), top)
        s.cached_run = min(run.longest(s.tokens), top)
        waves[s.wave].add(s.tokens)
        run.add(s.tokens)
        shared = [_common(prompt, s.tokens) for prompt in last]
        slot = max(used, key=lambda i: shared[i]) if max(shared) > 0 else used[0]
        s.cached_slots = min(shared[slot], top)
        last[slot] = s.tokens
        used.remove(slot)
        used.append(slot)
    planned(sent, slots)


def planned(sent: Sequence[Sent], slots: int = SLOTS) -> None:
    """`cached_planned`: each engine call planned over the slots as LlamaCppEngine plans it, then each slot's
    conversations in its order, each served the prefix it shares with the slot's previous prompt."""
    from juiz.engines.slots import plan_slots

    held_text = [""] * slots
    held: list[tuple[int, ...]] = [() for _ in range(slots)]
    waves: dict[int, list[Sent]] = defaultdict(list)
    for s in sent:
        waves[s.wave].append(s)
    for _, rows in sorted(waves.items()):
        plan = plan_slots([r.text for r in rows], held_text)
        for lane_no, lane in enumerate(plan):
            for i in lane:
                rows[i].cached_planned = min(_common(held[lane_no], rows[i].tokens), len(rows[i].tokens) - 1)
                held[lane_no], held_text[lane_no] = rows[i].tokens, rows[i].text


def _sum(rows: Iterable[Sent], what: str) -> int:
    return sum(getattr(r, what) if what != "prompt" else len(r.tokens) for r in rows)


def summarise(sent: Sequence[Sent], items: int) -> dict[str, Any]:
    """Per item: conversations, prompt, cached and computed tokens (both cache models), decode; by metric, by check
    kind and by check; and per wave (the critical path: the judge waits for each wave before the next)."""

    def figures(rows: list[Sent]) -> dict[str, Any]:
        prompt = _sum(rows, "prompt")
        out: dict[str, Any] = {
            "conversations_per_item": round(len(rows) / items, 2),
            "prompt_tokens_per_item": round(prompt / items, 1),
            "decode_tokens_per_item": round(_sum(rows, "decode") / items, 1),
        }
        for model in ("wave", "run", "slots", "planned"):
            cached = _sum(rows, f"cached_{model}")
            block = sum(r.__getattribute__(f"cached_{model}") // BLOCK * BLOCK for r in rows)
            out[f"computed_tokens_per_item_{model}"] = round((prompt - cached) / items, 1)
            out[f"cache_hit_rate_{model}"] = round(cached / prompt, 4) if prompt else None
            out[f"computed_tokens_per_item_{model}_block{BLOCK}"] = round((prompt - block) / items, 1)
        return out

    def grouped(key: str) -> dict[str, Any]:
        groups: dict[str, list[Sent]] = defaultdict(list)
        for s in sent:
            groups[getattr(s, key) if key != "check" else f"{s.metric}.{s.check} ({s.kind})"].append(s)
        return {name: figures(rows) for name, rows in sorted(groups.items())}

    waves: dict[int, list[Sent]] = defaultdict(list)
    for s in sent:
        waves[s.wave].append(s)
    return {
        "total": figures(list(sent)),
        "by_metric": grouped("metric"),
        "by_kind": grouped("kind"),
        "by_check": grouped("check"),
        "waves": [
            {
                "wave": w,
                "conversations": len(rows),
                "kinds": sorted({r.kind for r in rows}),
                **{k: v for k, v in figures(rows).items() if "block" not in k},
                "longest_decode": max(r.decode for r in rows),
            }
            for w, rows in sorted(waves.items())
        ],
    }


# Gradings of a split whose answer-relevance prompt is checks-8 (checks-9 grades it too, with groundedness checks-5).
REFERENCE_RUNS = ("checks-8", "checks-9")


def references(split: str) -> dict[str, str]:
    """Item id → the reference answer the real judge wrote for it (a checks-8 answer-relevance grading of the split)."""
    folder = REPO / "bench" / "results" / "judgements"
    path = next(p for run in REFERENCE_RUNS if (p := folder / f"{split}_{run}.jsonl.gz").exists())
    out = {}
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            result = json.loads(line)
            reference = (result.get("metrics") or {}).get("answer_relevance", {}).get("reference")
            if reference:
                out[result["id"]] = reference
    return out


def record(split: str, cell: str) -> list[dict[str, Any]]:
    """Grade the split with the FAKE engine; every conversation sent, in order, with its wave and what it is."""
    from bench.labelled import CELLS, labelled_set
    from juiz.engines.base import CallControl, Completion, Conversation, GenerationRequest
    from juiz.engines.fake import FakeEngine
    from juiz.judging.judge import Judge

    triples = labelled_set(split, None)
    written = references(split)
    reference_of: dict[str, str] = {}  # question → the reference written for it (one per question and context)
    for t in triples:
        if t.id in written:
            reference_of.setdefault(t.question, written[t.id])

    def reply(conversation: Conversation) -> str:
        user = conversation[-1]["content"]
        for question, ref in reference_of.items():
            if question in user:
                return ref
        return "Yes"

    calls: list[tuple[list[Conversation], GenerationRequest]] = []

    class Recording(FakeEngine):
        def generate(
            self, conversations: Sequence[Conversation], request: GenerationRequest, control: CallControl | None = None
        ) -> list[Completion]:
            calls.append((list(conversations), request))
            if request.word_groups:
                return [Completion(text="Yes", word_probs=(0.9, 0.1)) for _ in conversations]
            return super().generate(conversations, request, control)

    options = CELLS[cell].options()
    Judge(Recording(reply)).grade(triples, options)
    owners = _owners(triples, options, reference_of)
    sent = []
    for wave, (conversations, request) in enumerate(calls):
        for conversation in conversations:
            key = json.dumps(conversation, ensure_ascii=False)
            item, metric, check, kind = owners.get(key, ("?", "?", "?", "?"))
            decoded = reference_of.get(_question_in(conversation, reference_of), "") if not request.word_groups else ""
            sent.append(
                {
                    "wave": wave,
                    "item": item,
                    "metric": metric,
                    "check": check,
                    "kind": kind,
                    "conversation": conversation,
                    "decode_text": decoded,
                    "max_tokens": request.max_tokens,
                }
            )
    return sent


def _question_in(conversation: list[dict[str, str]], reference_of: dict[str, str]) -> str:
    user = conversation[-1]["content"]
    return next((q for q in reference_of if q in user), "")


def _owners(triples: Sequence[Any], options: Any, reference_of: dict[str, str]) -> dict[str, tuple[str, str, str, str]]:
    """Rendered conversation → (item, metric, check, kind): every item's plan, asked as the judge asks it."""
    from juiz.engines.fake import FakeEngine
    from juiz.judging.checks import CheckJob
    from juiz.judging.judge import context_segments
    from juiz.judging.plan import plan_item

    try:  # a judge from before the context budget shows every segment
        from juiz.judging.judge import shown_context
    except ImportError:
        import prompts

        def shown_context(triple: Any, segments: list[str], budget_chars: int | None) -> str:  # type: ignore[misc]
            return prompts.format_context(segments) if segments else "(none)"

    engine = FakeEngine(lambda _: "")
    owners: dict[str, tuple[str, str, str, str]] = {}
    for i, t in enumerate(triples):
        segments = context_segments(t.context)
        for metric, chosen in plan_item(options, t.question, engine).items():
            fields = {"question": t.question, "answer": t.answer}
            fields["context"] = shown_context(t, segments, getattr(options, "context_chars", None))
            job = CheckJob.plan(i, metric, chosen.template, fields, segments)
            if job.needs_reference:
                key = json.dumps(job.reference_conversation(), ensure_ascii=False)
                owners.setdefault(key, (t.id, metric, "reference", "reference"))
            asks_of = job.asks(reference_of.get(t.question))
            for ask in asks_of[0]:
                key = json.dumps(ask.conversation, ensure_ascii=False)
                owners.setdefault(key, (t.id, metric, ask.check.name, ask.check.ask))
    return owners


def tokenised(sent: Sequence[dict[str, Any]], model: Path) -> list[Sent]:
    from transformers import AutoTokenizer

    from juiz.engines.slots import prompt_text

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    out = []
    for s in sent:
        # The chat template's text, then its tokens: what vLLM's `llm.chat` rendering gives (no special tokens added:
        # the template writes them).
        text = tokenizer.apply_chat_template(s["conversation"], add_generation_prompt=True, tokenize=False)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        decode = 1
        if s["decode_text"]:
            decode = min(len(tokenizer(s["decode_text"])["input_ids"]) + 1, s["max_tokens"])
        sent_row = Sent(s["wave"], s["item"], s["metric"], s["check"], s["kind"], tuple(ids), decode)
        sent_row.text = prompt_text(s["conversation"])
        out.append(sent_row)
    return out


def _recorded_at(ref: str, split: str, cell: str) -> list[dict[str, Any]]:
    """`record` run against the code of git commit `ref` (exported to a temporary folder), with this file's recorder."""
    with tempfile.TemporaryDirectory() as tmp:
        tree, shim = Path(tmp) / "tree", Path(tmp) / "shim"
        tree.mkdir()
        shim.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        (shim / "tokens_recorder.py").write_text(Path(__file__).read_text(encoding="utf-8"), encoding="utf-8")
        out = Path(tmp) / "sent.json"
        code = (
            "import json, pathlib, sys; sys.path.insert(0, sys.argv[1]); import tokens_recorder as r; "
            "r.REPO = pathlib.Path(sys.argv[2]); "
            "json.dump(r.record(sys.argv[3], sys.argv[4]), open(sys.argv[5], 'w'))"
        )
        env = dict(os.environ, PYTHONPATH=str(tree))
        subprocess.run(
            [sys.executable, "-c", code, str(shim), str(tree), split, cell, str(out)], check=True, env=env, cwd=tree
        )
        return list(json.loads(out.read_text(encoding="utf-8")))


def changed(before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Which conversations one side sends and the other doesn't, by check, and the items they are asked for: a
    conversation sent by both has the same text, so its reply (and every grade made only of such replies) is the
    same on the same engine."""

    def keyed(side: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return {json.dumps(s["conversation"], ensure_ascii=False): s for s in side}

    old, new = keyed(before), keyed(after)

    def counted(keys: set[str], side: dict[str, dict[str, Any]]) -> dict[str, Any]:
        by_check: dict[str, int] = defaultdict(int)
        for k in keys:
            by_check[f"{side[k]['metric']}.{side[k]['check']}"] += 1
        items = sorted({side[k]["item"] for k in keys})
        return {"conversations": len(keys), "by_check": dict(sorted(by_check.items())), "items": items}

    return {
        "only_before": counted(old.keys() - new.keys(), old),
        "only_after": counted(new.keys() - old.keys(), new),
        "both": len(old.keys() & new.keys()),
    }


def main(argv: Sequence[str] | None = None) -> int:
    from bench.labelled import DEFAULT_CELLS, labelled_set

    parser = argparse.ArgumentParser(prog="python -m bench.tokens", description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="dev")
    parser.add_argument("--cell", default=DEFAULT_CELLS[0], help="a bench.labelled cell (default: the default judge)")
    parser.add_argument(
        "--before", metavar="REF", action="append", default=[], help="also measure the judge at this git commit"
    )
    parser.add_argument("--model", type=Path, default=MODEL, help="the judge's model folder (its tokenizer)")
    parser.add_argument("--out", type=Path, default=None, help="results file (default bench/results/tokens-...)")
    args = parser.parse_args(argv)
    items = len(labelled_set(args.split, None))
    sides: dict[str, list[dict[str, Any]]] = {}
    for ref in args.before:
        sides[f"before ({ref})"] = _recorded_at(ref, args.split, args.cell)
    sides["after"] = record(args.split, args.cell)
    report: dict[str, Any] = {
        "benchmark": "tokens",
        "split": args.split,
        "cell": args.cell,
        "items": items,
        "tokenizer": args.model.name,
        "note": "planned with the FAKE engine (no model): token counts exact, cache hits modelled (bench/tokens.py)",
    }
    for name, sent in sides.items():
        rows = tokenised(sent, args.model)
        cache(rows)
        report[name] = summarise(rows, items)
        total = report[name]["total"]
        print(
            f"{name}: {total['conversations_per_item']} conversations/item, {total['prompt_tokens_per_item']} prompt "
            f"tokens/item, computed {total['computed_tokens_per_item_wave']} (per-wave cache) / "
            f"{total['computed_tokens_per_item_run']} (whole-run cache) / {total['computed_tokens_per_item_slots']} "
            f"(llama.cpp's slots) / {total['computed_tokens_per_item_planned']} (slots as planned), "
            f"decode {total['decode_tokens_per_item']}, "
            f"{len(report[name]['waves'])} waves"
        )
    report["conversations_changed"] = {}
    for ref in args.before:
        diff = report["conversations_changed"][f"{ref} → after"] = changed(sides[f"before ({ref})"], sides["after"])
        print(
            f"{ref} → after: {diff['both']} conversations sent by both, same text; only before: "
            f"{diff['only_before']['by_check']}; only after: {diff['only_after']['by_check']} "
            f"({len(diff['only_after']['items'])} items)"
        )
    out = args.out or REPO / "bench" / "results" / f"tokens-{args.split}-{args.cell}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
