"""Prompt versions side by side: what each gives on labelled data, with the same model in one run.

Data: examples/judge_cases.jsonl (24 cases juiz wrote: relevant, partial, off-topic, refusal, false, injected; English
and Portuguese), the seeds' three triples (manual label C), and, where ../shared exists, TruLens's 17-case golden set
(expected scores on 0–1, a sanity set, not human labels). Prints, per prompt and mode: accuracy, quadratic κ, ROC AUC
of the expected score for "relevant (C) vs not", mean score per case type; writes bench/results/prompt_quality.json.

    .venv/bin/python -m bench.prompt_quality [--model NAME] [--prompts ID,ID] [--modes cot,fast]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path

from scipy.stats import spearmanr
from sklearn.metrics import roc_auc_score

from bench.common import load_engine
from bench.machine import describe_machine
from juiz.agreement.labels import label_unit_value, resolve_numeric_scale
from juiz.agreement.statistics import compute_agreement
from juiz.engines.models import DEFAULT_MODEL
from juiz.formats.readers import read_triples
from juiz.judging.judge import Judge
from schemas import BatchOptions, LabelMapping, Triple

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO.parent / "shared" / "data" / "answer_relevance_golden_set.jsonl"


def datasets() -> dict[str, list[Triple]]:
    data = {
        "juiz_cases": read_triples(REPO / "examples" / "judge_cases.jsonl"),
        "seeds": [t for p in sorted((REPO / "examples" / "seeds").glob("00*.txt")) for t in read_triples(p)],
    }
    if GOLDEN.exists():
        golden = read_triples(GOLDEN)
        data["golden"] = [t.model_copy(update={"manual_label": t.passthrough()["expected_score"]}) for t in golden]
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--prompts", default="answer_relevance@trulens-1,answer_relevance@juiz-1")
    parser.add_argument("--modes", default="cot,fast")
    args = parser.parse_args()

    engine = load_engine(args.model)
    judge = Judge(engine)
    data = datasets()
    rows = []
    for prompt in args.prompts.split(","):
        for mode in args.modes.split(","):
            options = BatchOptions(prompt=prompt, mode=mode)  # type: ignore[arg-type]
            for name, triples in data.items():
                started = time.perf_counter()
                results = judge.grade(triples, options)
                elapsed = time.perf_counter() - started
                report = compute_agreement(results, LabelMapping(), resamples=200)
                relevant = [1 if str(t.manual_label) == "C" or t.manual_label == 1 else 0 for t in triples]
                expected = [r.expected_score if r.expected_score is not None else 0.5 for r in results]
                auc = roc_auc_score(relevant, expected) if 0 < sum(relevant) < len(relevant) else None
                # Rank agreement of the expected score with the labels' own 0–1 values (the golden set's are graded).
                scale = resolve_numeric_scale([t.manual_label for t in triples], LabelMapping())
                label_values = [label_unit_value(t.manual_label, LabelMapping(), scale) for t in triples]
                rho = float(spearmanr(expected, label_values)[0]) if len(set(label_values)) > 1 else None
                by_case: dict[str, list[float]] = defaultdict(list)
                for t, r in zip(triples, results, strict=True):
                    if r.normalized_score is not None:
                        by_case[str(t.passthrough().get("case", t.manual_label))].append(r.normalized_score)
                row = {
                    "prompt": prompt,
                    "mode": mode,
                    "data": name,
                    "n": len(triples),
                    "ok": sum(r.status == "ok" for r in results),
                    "accuracy": report.accuracy.value,
                    "kappa_quadratic": report.cohen_kappa_quadratic.value,
                    "auc_expected_score": auc,
                    "spearman_expected_vs_label": rho,
                    "mean_score_by_case": {k: round(statistics.mean(v), 2) for k, v in sorted(by_case.items())},
                    "scores": [r.score for r in results],
                    "expected_scores": [r.expected_score for r in results],
                    "replies": {r.id: r.raw_output for r in results},
                    "seconds": round(elapsed, 1),
                }
                rows.append(row)
                brief = {k: v for k, v in row.items() if k not in ("replies", "expected_scores")}
                print(json.dumps(brief, ensure_ascii=False), flush=True)
    print()
    print(f"{'prompt':28} {'mode':5} {'data':11} {'n':>3} {'ok':>3} {'acc':>5} {'qκ':>5} {'AUC E[s]':>8}")
    for r in rows:
        fmt = lambda v: "  -  " if v is None else f"{v:5.2f}"  # noqa: E731
        print(
            f"{r['prompt']:28} {r['mode']:5} {r['data']:11} {r['n']:>3} {r['ok']:>3} {fmt(r['accuracy'])} "
            f"{fmt(r['kappa_quadratic'])} {fmt(r['auc_expected_score']):>8}"
        )
    out = REPO / "bench" / "results" / "prompt_quality.json"
    out.write_text(json.dumps({"machine": describe_machine(), "model": args.model, "rows": rows}, indent=1) + "\n")
    print(f"\nwritten: {out}")


if __name__ == "__main__":
    main()
