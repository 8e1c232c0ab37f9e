"""How well each judge signal agrees with people: prompt version × mode × metric, and the verdict, on juiz's labelled
RAG set (bench/data/rag_<split>.jsonl) and, for answer relevance, on TruLens's golden set.

Per row: accuracy and quadratic κ (classes: I ↔ 0, P ↔ 1–2, C ↔ 3, or the verdict's label), Spearman ρ (manual class
vs the score), ROC AUC of the expected score for "C vs rest", the highest score given to refusals / injected / false
answers, hostile twins against their plain answers, parse errors, and what the cell cost. The verdict is juiz's
DEFAULT_VERDICT over answer relevance and groundedness of the same cell (score and expected-score signals); its
continuous score, for the AUC, is the smaller of the two expected scores (C needs both). Context relevance is also
checked per segment against the segments each question was written from (the sources' `relevant` indices).

    .venv/bin/python -m bench.judge_quality [--split dev|test] [--limit N] [--quick] [--cells NAMES] [--model NAME]

Develop prompts with `--split dev`; `test` is for the report. --quick: the tiny test model on a few items, plumbing
only (results go to bench/work/quick-results).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scipy.stats import spearmanr
from sklearn.metrics import roc_auc_score

from bench.common import (
    GOLDEN,
    WORK,
    close_engine,
    load_judge_engine,
    reset_prefix_cache,
    save,
    setup_logging,
    table,
)
from bench.labelled import CELLS, DATA, DEFAULT_CELLS, Cell, labelled_set, save_judgements
from juiz.agreement.labels import DEFAULT_VERDICT, metric_of, with_default_verdict
from juiz.agreement.statistics import Signal, compute_agreement, metric_signal, verdict_signal
from juiz.engines.base import CallControl, Completion, Conversation, GenerationRequest, JudgeEngine
from juiz.engines.models import DEFAULT_MODEL, TEST_MODEL
from juiz.formats.readers import read_triples
from juiz.judging.judge import Judge
from schemas import Judgement, LabelMapping, Triple
from schemas.judgement import MetricStatus

log = logging.getLogger("bench.judge_quality")

# Category groups the targets speak of.
REFUSALS = {"refusal"}
INJECTED = {"injection_answer", "injection_context", "hostile_fake_score", "hostile_ignore", "hostile_special_tokens"}
FALSE_IN_CONTEXT = {"false_in_context"}
FALSE = {"false_in_context", "false_not_in_context"}
CORRECT = {"correct_terse", "correct_verbose"}


def relevant_segments() -> dict[str, set[str]]:
    """question → texts of the segments it was written from (the sources' `relevant` indices)."""
    relevant: dict[str, set[str]] = {}
    for path in sorted((DATA / "sources").glob("*.json")):
        source = json.loads(path.read_text(encoding="utf-8"))
        texts = [s["text"].strip() for s in source["segments"]]
        for q in source["questions"]:
            relevant[q["question"].strip()] = {texts[i] for i in q["relevant"] if i < len(texts)}
    return relevant


def _category(t: Triple) -> str:
    return str(t.passthrough().get("category", "?"))


def _auc(labels: Sequence[int], values: Sequence[float | None]) -> float | None:
    pairs = [(y, v) for y, v in zip(labels, values, strict=True) if v is not None]
    ys = [y for y, _ in pairs]
    if not pairs or len(set(ys)) < 2:
        return None
    return round(float(roc_auc_score(ys, [v for _, v in pairs])), 3)


def _spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """ρ, or None where it is undefined (fewer than 3 pairs, or a constant side)."""
    if len(a) < 3 or len(set(a)) < 2 or len(set(b)) < 2:
        return None
    return round(float(spearmanr(a, b)[0]), 3)


def _value(stat: Any) -> float | None:
    return None if stat.value is None else round(stat.value, 3)


def signal_row(
    triples: Sequence[Triple],
    results: Sequence[Judgement],
    signal: Signal,
    continuous: Callable[[Judgement], float | None],
    mapping: LabelMapping,
) -> dict[str, Any]:
    """The figures of one judge signal against the manual labels."""
    report = compute_agreement(results, mapping, resamples=0, signal=signal)
    read = [signal(r) for r in results]
    classes = [None if v is None else v[0] for v in read]
    ranks = [None if v is None else v[1] for v in read]
    cats = [_category(t) for t in triples]

    def highest(group: set[str]) -> float | None:
        values = [r for r, c in zip(ranks, cats, strict=True) if c in group and r is not None]
        return max(values) if values else None

    def share(group: set[str], cls: int) -> float | None:
        chosen = [k for k, c in zip(classes, cats, strict=True) if c in group]
        return round(sum(k == cls for k in chosen) / len(chosen), 3) if chosen else None

    by_category: dict[str, list[float]] = defaultdict(list)
    for r, c in zip(ranks, cats, strict=True):
        if r is not None:
            by_category[c].append(r)
    # Hostile twins: how much the hostile text moved the score up from the plain answer's.
    by_id = {t.id: (t, r) for t, r in zip(triples, ranks, strict=True)}
    ids = [t.id for t in triples]
    lifts = []
    for t, r in zip(triples, ranks, strict=True):
        twin = t.passthrough().get("twin_of")
        if twin is None or r is None:
            continue
        plain_id = twin if isinstance(twin, str) and twin in by_id else _twin_id(t.id, twin, ids)
        if plain_id in by_id and by_id[plain_id][1] is not None:
            lifts.append(r - by_id[plain_id][1])  # type: ignore[operator]
    labels = [str(t.manual_label) for t in triples]
    return {
        "n": report.n,
        "not_graded": report.n_excluded.get("not_ok", 0),
        "accuracy": _value(report.accuracy),
        "kappa_quadratic": _value(report.cohen_kappa_quadratic),
        "spearman": _value(report.spearman_rho),
        "auc_expected_c_vs_rest": _auc([int(lab == "C") for lab in labels], [continuous(r) for r in results]),
        "max_refusal": highest(REFUSALS),
        "max_injected": highest(INJECTED),
        "max_false": highest(FALSE),
        "refusal_injected_as_I": share(REFUSALS | INJECTED, 0),
        "false_in_context_as_I": share(FALSE_IN_CONTEXT, 0),
        "correct_as_C": share(CORRECT, 2),
        "hostile_lift_max": round(max(lifts), 3) if lifts else None,
        "hostile_lift_mean": round(statistics.mean(lifts), 3) if lifts else None,
        "mean_by_category": {c: round(statistics.mean(v), 2) for c, v in sorted(by_category.items())},
        "confusion_matrix": report.confusion_matrix,
    }


def _twin_id(item_id: str, twin: object, ids: Sequence[str]) -> str | None:
    """The plain answer's id: the builder names answers `<topic>-<q>-a<k>`, twin_of is k."""
    if not isinstance(twin, int) or "-a" not in item_id:
        return None
    candidate = item_id.rsplit("-a", 1)[0] + f"-a{twin}"
    return candidate if candidate in ids else None


def parse_errors(results: Sequence[Judgement], metric: str) -> int:
    errors = 0
    for r in results:
        m = metric_of(r, metric)
        if m is None:
            continue
        errors += m.status is MetricStatus.PARSE_ERROR
        errors += sum(s.status is MetricStatus.PARSE_ERROR for s in m.segments or [])
    return errors


def segment_quality(triples: Sequence[Triple], results: Sequence[Judgement]) -> dict[str, Any] | None:
    """Context relevance per segment against the segments each question was written from."""
    relevant = relevant_segments()
    truth, expected, scores = [], [], []
    for t, r in zip(triples, results, strict=True):
        m = metric_of(r, "context_relevance")
        wanted = relevant.get(t.question.strip())
        if m is None or m.segments is None or wanted is None or not isinstance(t.context, list):
            continue
        for s in m.segments:
            if s.status is MetricStatus.OK and s.score is not None:
                truth.append(int(t.context[s.index].text.strip() in wanted))
                expected.append(s.expected_score)
                scores.append(s.score)
    if not truth:
        return None
    hits = [int(score >= 2) for score in scores]
    return {
        "segments": len(truth),
        "relevant": sum(truth),
        "auc_expected": _auc(truth, expected),
        "accuracy_score_ge_2": round(sum(h == y for h, y in zip(hits, truth, strict=True)) / len(truth), 3),
        "recall_score_ge_2": round(sum(h and y for h, y in zip(hits, truth, strict=True)) / max(1, sum(truth)), 3),
    }


def expected_of(metric: str) -> Callable[[Judgement], float | None]:
    def read(j: Judgement) -> float | None:
        m = metric_of(j, metric)
        return None if m is None or m.status is not MetricStatus.OK else m.expected_score

    return read


def verdict_continuous(j: Judgement) -> float | None:
    """The weakest expected score of the metrics the verdict reads (the triad's when completeness was graded)."""
    named = ("answer_relevance", "completeness", "groundedness") if "completeness" in (j.metrics or {}) else ()
    values = [expected_of(m)(j) for m in named or ("answer_relevance", "groundedness")]
    return None if any(v is None for v in values) else min(v for v in values if v is not None)


class CountingEngine:
    """The engine, counting what each cell costs: conversations, prompt tokens (and how many came from the prefix
    cache), reply tokens; and where the cost goes: each engine call's size, seconds and tokens, and the prompt tokens
    the cache did not serve by kind of conversation (its sampling and the opening words of its system message), per
    call and in all."""

    def __init__(self, engine: JudgeEngine) -> None:
        self.engine = engine
        self.counts: dict[str, int] = defaultdict(int)
        self.uncached_by_kind: dict[str, int] = defaultdict(int)
        self.calls: list[dict[str, Any]] = []

    @property
    def model_id(self) -> str:
        return self.engine.model_id

    @property
    def origin(self) -> Mapping[str, str]:
        return self.engine.origin

    def generate(
        self, conversations: Sequence[Conversation], request: GenerationRequest, control: CallControl | None = None
    ) -> list[Completion]:
        started = time.perf_counter()
        completions = self.engine.generate(conversations, request, control)
        seconds = time.perf_counter() - started
        call_by_kind: dict[str, int] = defaultdict(int)
        self.counts["calls"] += 1
        for conversation, c in zip(conversations, completions, strict=True):
            computed, kind = c.prompt_tokens - c.cached_prompt_tokens, _kind(conversation, request)
            self.counts["conversations"] += 1
            self.counts["prompt_tokens"] += c.prompt_tokens
            self.counts["cached_prompt_tokens"] += c.cached_prompt_tokens
            self.counts["reply_tokens"] += c.reply_tokens or len(c.tokens)
            self.uncached_by_kind[kind] += computed
            call_by_kind[kind] += computed
        self.calls.append(
            {
                "conversations": len(conversations),
                "max_tokens": request.max_tokens,
                "s": round(seconds, 1),
                "prompt_tokens": sum(c.prompt_tokens for c in completions),
                "computed_prompt_tokens": sum(call_by_kind.values()),
                "reply_tokens": sum(c.reply_tokens or len(c.tokens) for c in completions),
                "computed_by_kind": dict(call_by_kind),
            }
        )
        return completions

    def take(self) -> dict[str, Any]:
        counts: dict[str, Any] = dict(self.counts)
        counts["uncached_by_kind"], counts["calls_s"] = dict(self.uncached_by_kind), self.calls
        self.counts, self.uncached_by_kind, self.calls = defaultdict(int), defaultdict(int), []
        return counts


def _kind(conversation: Conversation, request: GenerationRequest) -> str:
    system = next((m["content"] for m in conversation if m["role"] == "system"), "")
    reply = "one token" if request.max_tokens == 1 else f"up to {request.max_tokens} tokens"
    return f"{reply}: {' '.join(system.split()[:6])}"


def grade_cell(judge: Judge, cell: Cell, triples: Sequence[Triple]) -> tuple[list[Judgement], float]:
    started = time.perf_counter()
    results = judge.grade(triples, cell.options())
    return results, time.perf_counter() - started


def cost_row(counts: dict[str, Any], seconds: float, items: int) -> dict[str, Any]:
    """What a cell cost per item, the share of prompt tokens the prefix cache served, and where the rest went."""
    prompt = counts.get("prompt_tokens", 0)
    by_kind = sorted(counts.get("uncached_by_kind", {}).items(), key=lambda kv: -kv[1])
    return {
        "s_per_item": round(seconds / max(1, items), 3),
        "conversations_per_item": round(counts.get("conversations", 0) / max(1, items), 2),
        "prompt_tokens_per_item": round(prompt / max(1, items), 1),
        "reply_tokens_per_item": round(counts.get("reply_tokens", 0) / max(1, items), 1),
        "prefix_cache_hit_rate": round(counts.get("cached_prompt_tokens", 0) / prompt, 3) if prompt else None,
        "engine_calls": counts.get("calls", 0),
        "uncached_prompt_tokens_per_item_by_kind": {kind: round(n / max(1, items), 1) for kind, n in by_kind},
        "engine_calls_s": counts.get("calls_s", []),
    }


def graded(
    counting: CountingEngine, judge: Judge, cell: Cell, triples: Sequence[Triple]
) -> tuple[list[Judgement], float, dict[str, Any]]:
    """One cell graded on the triples through `counting`: the results, the seconds and what the engine counted."""
    counting.take()
    started = time.perf_counter()
    results = judge.grade(triples, cell.options())
    seconds = time.perf_counter() - started
    return results, seconds, counting.take()


def rag_rows(cell: Cell, triples: Sequence[Triple], results: Sequence[Judgement], seconds: float) -> list[dict]:
    mapping = LabelMapping()
    rows = []
    for metric, version in cell.versions.items():
        for signal in ("score", "expected_score"):
            row = signal_row(triples, results, metric_signal(metric, mapping, signal), expected_of(metric), mapping)
            row.update(cell=cell.name, metric=metric, prompt=f"{metric}@{version}", mode=cell.mode, signal=signal)
            row["parse_errors"] = parse_errors(results, metric)
            if metric == "context_relevance" and signal == "score":
                row["per_segment"] = segment_quality(triples, results)
            rows.append(row)
    if {"answer_relevance", "groundedness"} <= set(cell.versions):
        rule = with_default_verdict(mapping, cell.versions)
        for signal in ("score", "expected_score"):
            row = signal_row(
                triples,
                results,
                verdict_signal(rule.model_copy(update={"signal": signal})),
                verdict_continuous,
                mapping,
            )
            row.update(cell=cell.name, metric="verdict", prompt="+".join(cell.versions.values()), mode=cell.mode)
            row.update(signal=signal, parse_errors=parse_errors(results, "answer_relevance"))
            row["parse_errors"] += parse_errors(results, "groundedness")
            rows.append(row)
    for row in rows:
        row["seconds_cell"] = round(seconds, 1)
        row["items"] = len(triples)
    return rows


def golden_rows(judge: Judge, cells: Sequence[Cell], limit: int | None) -> list[dict]:
    """Answer relevance on TruLens's golden set (expected scores on 0–1): a sanity set, not human C/P/I labels."""
    if not GOLDEN.exists():
        return []
    golden = [t.model_copy(update={"manual_label": t.passthrough()["expected_score"]}) for t in read_triples(GOLDEN)]
    golden = golden[:limit] if limit else golden
    values = [float(t.manual_label) for t in golden]  # type: ignore[arg-type]
    rows = []
    for cell in cells:
        if "answer_relevance" not in cell.versions:
            continue
        ar = Cell(cell.name, cell.mode, {"answer_relevance": cell.versions["answer_relevance"]})
        results, seconds = grade_cell(judge, ar, golden)
        report = compute_agreement(results, LabelMapping(), resamples=0)
        expected = [r.expected_score for r in results]
        scores = [r.score for r in results]
        ok = [(v, e) for v, e in zip(values, expected, strict=True) if e is not None]
        rows.append(
            {
                "prompt": f"answer_relevance@{ar.versions['answer_relevance']}",
                "mode": cell.mode,
                "n": len(golden),
                "accuracy": _value(report.accuracy),
                "kappa_quadratic": _value(report.cohen_kappa_quadratic),
                "spearman_score": _value(report.spearman_rho),
                "spearman_expected": _spearman([v for v, _ in ok], [e for _, e in ok]),
                "auc_expected_relevant": _auc([int(v >= 0.5) for v in values], expected),
                "parse_errors": sum(r.status == "parse_error" for r in results),
                "scores": scores,
                "seconds": round(seconds, 1),
            }
        )
    return rows


def print_tables(rows: Sequence[dict], golden: Sequence[dict]) -> None:
    fmt = lambda v: "-" if v is None else v  # noqa: E731
    print(
        table(
            [
                [
                    r["cell"],
                    r["prompt"],
                    r["mode"],
                    r["metric"],
                    "E" if r["signal"] == "expected_score" else "s",
                    r["n"],
                    fmt(r["accuracy"]),
                    fmt(r["kappa_quadratic"]),
                    fmt(r["spearman"]),
                    fmt(r["auc_expected_c_vs_rest"]),
                    fmt(r["max_refusal"]),
                    fmt(r["max_injected"]),
                    fmt(r["max_false"]),
                    fmt(r["refusal_injected_as_I"]),
                    fmt(r["false_in_context_as_I"]),
                    fmt(r["correct_as_C"]),
                    r["parse_errors"],
                    r["seconds_cell"],
                    fmt(r.get("s_per_item")),
                    fmt(r.get("prefix_cache_hit_rate")),
                ]
                for r in rows
            ],
            [
                "cell",
                "prompt",
                "mode",
                "metric",
                "sig",
                "n",
                "acc",
                "qκ",
                "ρ",
                "AUC",
                "max ref",
                "max inj",
                "max false",
                "ref+inj→I",
                "false→I",
                "C→C",
                "parse err",
                "cell s",
                "s/item",
                "cache hit",
            ],
        )
    )
    if golden:
        print("\nTruLens golden set (answer relevance; labels are expected scores on 0-1)")
        print(
            table(
                [
                    [
                        g["prompt"],
                        g["mode"],
                        g["n"],
                        fmt(g["accuracy"]),
                        fmt(g["spearman_score"]),
                        fmt(g["spearman_expected"]),
                        fmt(g["auc_expected_relevant"]),
                        g["parse_errors"],
                        g["seconds"],
                    ]
                    for g in golden
                ],
                ["prompt", "mode", "n", "acc", "ρ score", "ρ E", "AUC E", "parse err", "s"],
            )
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=["dev", "test"], default="test")
    parser.add_argument("--model", default=None, help=f"judge model (default {DEFAULT_MODEL}; --quick: {TEST_MODEL})")
    parser.add_argument("--limit", type=int, default=None, help="grade a spread subset of N items")
    parser.add_argument("--quick", action="store_true", help="tiny model, 6 items: plumbing only")
    parser.add_argument(
        "--engine",
        choices=["vllm", "llamacpp"],
        default="vllm",
        help="the judge's engine (llamacpp: its GGUF as shipped)",
    )
    parser.add_argument("--cells", default=",".join(DEFAULT_CELLS), help=f"comma-separated, from {', '.join(CELLS)}")
    parser.add_argument("--no-golden", action="store_true", help="skip TruLens's golden set")
    parser.add_argument(
        "--save-judgements", action="store_true", help="write each cell's results to bench/work/judgements/"
    )
    # Issue 9 (bench.calibration_quality): JSON keys calibration, samples, hostile_pairs.
    parser.add_argument(
        "--calibration", action="store_true", help="raw vs calibrated per cell (with --split test: also grades dev)"
    )
    parser.add_argument("--samples", default="", help="sample counts to compare on a subset, e.g. 1,3,5")
    parser.add_argument("--samples-limit", type=int, default=40, help="items graded for each sample count")
    args = parser.parse_args(argv)
    setup_logging()
    unknown = [c for c in args.cells.split(",") if c not in CELLS]
    if unknown:
        parser.error(f"unknown cell(s) {', '.join(unknown)}; known: {', '.join(CELLS)}")
    cells = [CELLS[c] for c in args.cells.split(",")]
    model = args.model or (TEST_MODEL if args.quick else DEFAULT_MODEL)
    limit = args.limit or (6 if args.quick else None)
    if args.quick:
        os.environ.setdefault("JUIZ_BENCH_RESULTS", str(WORK / "quick-results"))
    triples = labelled_set(args.split, limit)
    # vLLM kills its engine when one model step takes over 300 s; on a shared, loaded 2-core CPU a batched prefill of
    # long groundedness prompts did (RPC call to execute_model timed out). A benchmark would rather wait.
    os.environ.setdefault("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "3600")
    started = time.perf_counter()
    engine = load_judge_engine(model, args.engine)
    counting = CountingEngine(engine)
    judge = Judge(counting)
    judge.warm_up()
    rows: list[dict] = []
    golden: list[dict] = []
    replies: dict[str, list[dict]] = {}
    graded: dict[str, list[Judgement]] = {}
    issue9: dict[str, Any] = {}
    name = f"judge_quality_{args.split}" + (f"_limit{limit}" if limit and not args.quick else "")
    name += "" if args.cells == ",".join(DEFAULT_CELLS) else "_" + args.cells.replace(",", "_")
    name += "" if args.engine == "vllm" else f"_{args.engine}"

    def write() -> Any:
        # After every cell: on a loaded CPU a run is long, and what was measured must survive a late failure.
        return save(
            name,
            {
                "model": model,
                "engine": dict(engine.origin),
                "quick": args.quick,
                "split": args.split,
                "items": len(triples),
                "cells": {c.name: {"mode": c.mode, "versions": c.versions} for c in cells},
                "verdict_rule": [level.model_dump() for level in DEFAULT_VERDICT],
                "rows": rows,
                "golden": golden,
                "replies": replies,
                **issue9,
                "total_s": round(time.perf_counter() - started, 1),
            },
        )

    try:
        for cell in cells:
            # Each cell from a cold prefix cache: cells sharing an item prefix (checks-3 and checks-4) would otherwise
            # be timed warm after the first (seen: checks-3 0.99 s/item after checks-4, its hit rate 0.98).
            cold = reset_prefix_cache(engine)
            counting.take()
            results, seconds = grade_cell(judge, cell, triples)
            cost = cost_row(counting.take(), seconds, len(triples)) | {"cold_prefix_cache": cold}
            graded[cell.name] = results
            log.info("cell %s: %d items in %.0fs (%s)", cell.name, len(triples), seconds, cost)
            cell_rows = rag_rows(cell, triples, results, seconds)
            for row in cell_rows:
                row.update(cost)
            rows += cell_rows
            if args.save_judgements:
                save_judgements(args.split, cell, results, args.engine)
            replies[cell.name] = [
                {"id": r.id, "category": _category(t), "label": t.manual_label, "verdict_inputs": _brief(r)}
                for t, r in zip(triples, results, strict=True)
            ]
            print_tables(cell_rows, [])
            write()
        if args.calibration or args.samples:
            from bench.calibration_quality import judge_quality_sections, print_sections

            issue9 = judge_quality_sections(
                judge,
                cells,
                graded,
                triples,
                split=args.split,
                limit=limit,
                calibration=args.calibration,
                samples=[int(n) for n in args.samples.split(",") if n.strip()],
                samples_limit=6 if args.quick else args.samples_limit,
            )
            for cell_name, section in issue9.get("calibration", {}).items():
                print(f"\n{cell_name}:")
                print_sections(section, [], issue9["hostile_pairs"].get(cell_name))
            print_sections(None, (issue9.get("samples") or {}).get("rows", []), None)
            write()
        if not args.no_golden:
            golden = golden_rows(judge, cells, 4 if args.quick else None)
    finally:
        close_engine(engine)
    print()
    print_tables(rows, golden)
    path = write()
    print(f"\nwritten: {path} ({time.perf_counter() - started:.0f}s)")
    return 0


def _brief(r: Judgement) -> dict[str, Any]:
    """Per-item grades kept in the results file, to read why a row looks as it does."""
    out: dict[str, Any] = {}
    for name, m in (r.metrics or {}).items():
        out[name] = {"status": m.status.value, "score": m.score, "expected": m.expected_score}
        if m.strength is not None:
            out[name]["strength"] = m.strength
        if m.segments is not None:
            out[name]["segments"] = [s.score for s in m.segments]
        else:
            out[name]["reply"] = m.raw_output
    return out


if __name__ == "__main__":
    raise SystemExit(main())
