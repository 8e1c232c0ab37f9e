"""Two gradings of the same split with the same prompts, item by item: how far apart two engines (or two machines)
grade, without a model.

    .venv/bin/python -m bench.engine_pairs A.jsonl[.gz] B.jsonl[.gz] [--cell checks-14] [--name engine_pairs]

A and B are judgements `bench.judge_quality --save-judgements` kept (e.g. vLLM bf16 and llama.cpp Q4_K_M on dev).
Each item's checks are combined under the `--cell`'s rules (bench.rule_fit.rescored), so both sides are read with
the same cuts. Prints and saves, per metric, the mean and largest |Δ strength| and how many scores differ; for the
verdict, how many items change class, how many of those sit within `--near` of a cut on either side (a difference of
noise at a threshold, not of judgement), and each side's ρ and quadratic κ against the labels with an exact McNemar
test of the items each side gets right.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import binomtest

import prompts
from bench.common import save, table
from bench.labelled import CELLS
from bench.rule_fit import METRICS, figures, rescored, scores, verdict


def cuts_of(cell: str) -> dict[str, tuple[float, ...]]:
    """Each metric's released cuts in the cell's prompts (English and Portuguese files share them)."""
    out = {}
    for metric in METRICS:
        rule = prompts.load(metric, CELLS[cell].versions[metric], "en").rule
        assert rule is not None, f"{metric} of cell {cell} is not check-based"
        out[metric] = rule.cuts
    return out


def compare(a: dict[str, Any], b: dict[str, Any], cuts: dict[str, tuple[float, ...]], near: float) -> dict[str, Any]:
    y = a["y"]
    assert np.array_equal(y, b["y"]), "the two gradings are not of the same items in the same order"
    out: dict[str, Any] = {"items": len(y), "metrics": {}}
    graded = {}
    for metric in METRICS:
        (sa, va), (sb, vb) = a[metric], b[metric]
        score_a, score_b = scores(sa, va, cuts[metric]), scores(sb, vb, cuts[metric])
        graded[metric] = (score_a, score_b)
        delta = np.abs(sa - sb)
        out["metrics"][metric] = {
            "mean_abs_strength_delta": round(float(delta.mean()), 3),
            "max_abs_strength_delta": round(float(delta.max()), 3),
            "vetoes_differ": int((va != vb).sum()),
            "scores_differ": int((score_a != score_b).sum()),
        }
    label_a = verdict({m: s[0] * 1.0 for m, s in graded.items()})
    label_b = verdict({m: s[1] * 1.0 for m, s in graded.items()})
    moved = label_a != label_b
    at_a_cut = np.zeros(len(y), dtype=bool)
    for metric in METRICS:
        for side in (a, b):
            strength = side[metric][0]
            at_a_cut |= np.min(np.abs(strength[:, None] - np.array(cuts[metric])[None, :]), axis=1) < near
    right_a, right_b = label_a == y, label_b == y
    only_a, only_b = int((right_a & ~right_b).sum()), int((right_b & ~right_a).sum())
    out["verdict"] = {
        "classes_differ": int(moved.sum()),
        "of_them_within_near_of_a_cut": int((moved & at_a_cut).sum()),
        "a": figures(y, label_a, label_a),
        "b": figures(y, label_b, label_b),
        "accuracy_a": round(float(right_a.mean()), 3),
        "accuracy_b": round(float(right_b.mean()), 3),
        "right_only_a": only_a,
        "right_only_b": only_b,
        "mcnemar_p": round(float(binomtest(only_a, only_a + only_b).pvalue), 3) if only_a + only_b else 1.0,
    }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--cell", default="checks-14", help="the bench.labelled cell whose rules read both")
    parser.add_argument("--near", type=float, default=0.05, help="a strength this close to a cut counts as at it")
    parser.add_argument("--name", default="engine_pairs", help="the results file's name (bench/results/NAME.json)")
    args = parser.parse_args(argv)
    cuts = cuts_of(args.cell)
    report = compare(rescored(args.a, args.cell), rescored(args.b, args.cell), cuts, args.near)
    report |= {"a": args.a.name, "b": args.b.name, "cell": args.cell, "cuts": cuts, "near": args.near}
    rows = [[m, *f.values()] for m, f in report["metrics"].items()]
    print(table(rows, ["metric", "mean |Δ strength|", "max |Δ strength|", "vetoes differ", "scores differ"]))
    v = report["verdict"]
    print(
        f"\nverdict: {v['classes_differ']} of {report['items']} items change class "
        f"({v['of_them_within_near_of_a_cut']} within {args.near} of a cut); accuracy {v['accuracy_a']} ({args.a.name})"
        f" vs {v['accuracy_b']} ({args.b.name}), right on one side only {v['right_only_a']} / {v['right_only_b']}, "
        f"McNemar p = {v['mcnemar_p']}; ρ {v['a']['spearman']} vs {v['b']['spearman']}, quadratic κ "
        f"{v['a']['kappa_quadratic']} vs {v['b']['kappa_quadratic']}"
    )
    save(args.name, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
