"""A check rule's cuts, fitted on a recorded dev run and applied to a recorded test run, without the engine.

The rule's grade depends on the checks' P(yes) only through each metric's strength (its expected score) and whether
a veto fired, and both are in every recorded `bench.judge_quality` result (`replies.<cell>[].verdict_inputs`: the
expected score, and the written grade that names a veto). So new cuts can be fitted on dev and measured on test from
the runs already made, and the figures are the ones the engine would give with a prompt that only changes the cuts
(checks-3 is checks-2 with rule-3's cuts; `bench.judge_quality --cells checks-3` grades with it for real).

    .venv/bin/python -m bench.rule_fit [--dev RESULT.json] [--test RESULT.json] [--cell checks-8] [--name rule_fit]

Prints, per objective (unweighted quadratic κ: rule-2; every class weighted equally: rule-3; and "verdict": answer
relevance's rule-3 cuts held, groundedness's cuts fitted on the default verdict's agreement, every class weighted
equally; and answer relevance's cuts fitted on the verdict's quadratic κ, groundedness's released cuts held), the
cuts fitted on dev and, for dev and test, each metric's and the default verdict's Spearman ρ, quadratic κ and
per-class recall. Writes bench/results/rule_fit.json.

`--dev` (or `--test`) may also name the judgements `bench.judge_quality --save-judgements` kept
(bench/work/judgements/<split>_<cell>.jsonl, or a gzipped copy committed in bench/results/judgements): each item's
checks are then combined again under the rules of the `--cell`'s prompts, so a rule's new combination of the same
checks is fitted without asking them again (checks-9 on a checks-8 grading: the same conversations, groundedness read
by its least supported sentence).
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import cohen_kappa_score

import prompts
from bench.check_report import GRID, fit_cut_arrays
from bench.common import RESULTS, save, table
from bench.judge_quality import _spearman
from bench.labelled import CELLS, CLASSES, labelled_set, read_judgements
from juiz.agreement.labels import DEFAULT_VERDICT
from juiz.judging.check_rule import apply_rule
from juiz.judging.word_overlap import with_counted

METRICS = ("answer_relevance", "groundedness")
# The default judge's recorded runs (answer relevance checks-8, groundedness checks-4).
DEV = RESULTS / "judge_quality_dev_checks-8.json"
TEST = RESULTS / "judge_quality_test_checks-8_cot-v2.json"


def recorded(path: Path, cell: str) -> dict[str, Any]:
    """Labels (0 I, 1 P, 2 C) and, per metric, strengths and vetoes of a recorded run's labelled items."""
    if path.name.endswith((".jsonl", ".jsonl.gz")):
        return rescored(path, cell)
    replies = json.loads(path.read_text(encoding="utf-8"))["replies"][cell]
    out: dict[str, Any] = {"y": np.array([CLASSES[r["label"]] for r in replies])}
    for metric in METRICS:
        inputs = [r["verdict_inputs"][metric] for r in replies]
        assert all(i["status"] == "ok" for i in inputs), f"{path.name}: {metric} not graded on every item"
        # The strength the cuts are read against: recorded apart since rule-6's banded expected score; before, the
        # expected score was the strength.
        out[metric] = (
            np.array([float(i.get("strength", i["expected"])) for i in inputs]),
            np.array(["vetoed:" in i["reply"] for i in inputs]),
        )
    return out


def rescored(path: Path, cell: str) -> dict[str, Any]:
    """Labels, strengths and vetoes from saved judgements, each metric's checks combined under the rule of the
    cell's prompt for it, in the language its provenance names (a cell whose prompt only reads the same checks
    another way, e.g. checks-9's groundedness, is measured on a grading made with the other)."""
    versions = CELLS[cell].versions
    split = path.name.split("_", 1)[0]
    labels = {t.id: t.manual_label for t in labelled_set(split, None)}
    judgements = read_judgements(path)
    out: dict[str, Any] = {"y": np.array([CLASSES[str(labels[j.id])] for j in judgements])}
    for metric in METRICS:
        strengths, vetoes = [], []
        for j in judgements:
            result = (j.metrics or {})[metric]
            assert result.provenance is not None and result.checks is not None, f"{path.name}: {metric} has no checks"
            name, version, lang = prompts.parse_prompt_id(result.provenance.prompt)
            template = prompts.load(name, versions.get(name, version), lang or "en")
            outcome = apply_rule(template, with_counted(template, result.checks, j.question, j.answer))
            assert outcome.ok and outcome.strength is not None, f"{path.name}: {j.id}'s {metric} is not graded"
            strengths.append(outcome.strength)
            vetoes.append("vetoed:" in outcome.supporting_evidence)
        out[metric] = (np.array(strengths), np.array(vetoes))
    return out


def fit_on_verdict(
    y: np.ndarray,
    metric: str,
    strength: np.ndarray,
    vetoed: np.ndarray,
    held: np.ndarray,
    *,
    balanced: bool,
    grid: Sequence[float] = GRID,
) -> tuple[float, float, float]:
    """One metric's cuts that make the default verdict agree best with the labels, the other metric's scores `held`:
    the cuts for scores 2 and 3 by the verdict's quadratic κ (every class weighted equally when `balanced`; ties: the
    narrower pair), the cut for score 1 (which the verdict never sees: 0 and 1 are both I) below them by the metric's
    own ρ."""
    other = next(m for m in METRICS if m != metric)
    weights = (len(y) / (3 * np.bincount(y, minlength=3)))[y] if balanced else None

    def kappa_of(pair: tuple[float, float]) -> float:
        decided = verdict({metric: scores(strength, vetoed, (0.0, *pair)) * 1.0, other: held})
        return float(cohen_kappa_score(y, decided, weights="quadratic", labels=[0, 1, 2], sample_weight=weights))

    best = max(itertools.combinations(grid, 2), key=lambda pair: (kappa_of(pair), -(pair[1] - pair[0])))

    def rho_of(c1: float) -> float:
        return _spearman([float(t) for t in y], [float(s) for s in scores(strength, vetoed, (c1, *best))]) or -1.0

    c1 = max((c for c in grid if c < best[0]), key=rho_of)
    return (c1, *best)


def fit_gate_cuts(y: np.ndarray, held: np.ndarray, strength: np.ndarray, vetoed: np.ndarray) -> tuple[float, ...]:
    """Groundedness's cuts on the default verdict (every class weighted equally), answer relevance's scores `held`."""
    return fit_on_verdict(y, "groundedness", strength, vetoed, held, balanced=True)


# Answer relevance's cuts on the verdict reach down to 0.10: a reading on another scale (rule-8's blend of P(yes) and
# word shares sits lower) must not be clipped at GRID's 0.30.
WIDE_GRID = [round(x, 2) for x in np.arange(0.10, 0.96, 0.01)]


def fit_relevance_cuts(
    y: np.ndarray, strength: np.ndarray, vetoed: np.ndarray, held: np.ndarray
) -> tuple[float, float, float]:
    """Answer relevance's cuts on the default verdict's quadratic κ as `bench.judge_quality` reports it (unweighted:
    with every class weighted equally the optimum on dev sat at the grid's floor, letting a quarter of the I answers
    through to P on a flat plateau), groundedness's scores `held` at its prompt's own cuts: for a design that changes
    only how answer relevance reads its checks."""
    return fit_on_verdict(y, "answer_relevance", strength, vetoed, held, balanced=False, grid=WIDE_GRID)


def scores(strength: np.ndarray, vetoed: np.ndarray, cuts: tuple[float, ...]) -> np.ndarray:
    """The rule's 0–3 score (juiz.judging.check_rule.apply_rule): 0 when vetoed, else how many cuts the strength
    reaches."""
    return np.where(vetoed, 0, (strength[:, None] >= np.array(cuts)[None, :]).sum(axis=1))


def verdict(by_metric: dict[str, np.ndarray]) -> np.ndarray:
    """DEFAULT_VERDICT's class: the first level whose minimums every metric meets, else I."""
    out = np.zeros(len(next(iter(by_metric.values()))), dtype=int)
    for level in reversed(DEFAULT_VERDICT):
        met = np.all([by_metric[m] >= minimum for m, minimum in level.when.items()], axis=0)
        out = np.where(met, CLASSES[level.label], out)
    return out


def figures(y: np.ndarray, score: np.ndarray, label: np.ndarray) -> dict[str, Any]:
    recall = {name: round(float((label[y == k] == k).mean()), 3) for name, k in CLASSES.items()}
    return {
        "spearman": _spearman([float(t) for t in y], [float(s) for s in score]),
        "kappa_quadratic": round(float(cohen_kappa_score(y, label, weights="quadratic", labels=[0, 1, 2])), 3),
        "recall": recall,
        "balanced_accuracy": round(float(np.mean(list(recall.values()))), 3),
    }


def measure(run: dict[str, Any], cuts: dict[str, tuple[float, ...]]) -> dict[str, Any]:
    y = run["y"]
    by_metric = {m: scores(*run[m], cuts[m]) for m in METRICS}
    # Under the default mapping score 3 is C, 2 is P, 0–1 are I.
    out = {m: figures(y, s, np.select([s >= 3, s >= 2], [2, 1], 0)) for m, s in by_metric.items()}
    decided = verdict({m: s.astype(float) for m, s in by_metric.items()})
    out["verdict"] = figures(y, decided, decided)
    return out


def released_cuts(cell: str, metric: str) -> tuple[float, ...]:
    """The cuts the cell's prompt for this metric was released with."""
    rule = prompts.load(metric, CELLS[cell].versions[metric], "en").rule
    assert rule is not None, f"{cell}'s {metric} prompt has no rule"
    return rule.cuts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dev", type=Path, default=DEV, help="a recorded dev run (cuts are fitted on dev only)")
    parser.add_argument("--test", type=Path, default=TEST, help="a recorded test run to measure the cuts on")
    parser.add_argument("--cell", default="checks-8")
    parser.add_argument("--name", default="rule_fit", help="the results file's name (bench/results/NAME.json)")
    args = parser.parse_args(argv)
    dev, test = recorded(args.dev, args.cell), recorded(args.test, args.cell)
    report: dict[str, Any] = {"dev": args.dev.name, "test": args.test.name, "cell": args.cell, "objectives": {}}
    rows = []
    objectives = (
        "unweighted κ (rule-2)",
        "classes weighted equally (rule-3)",
        "verdict (groundedness as its gate)",
        "verdict (answer relevance, groundedness's cuts held)",
    )
    for objective in objectives:
        cuts = {m: fit_cut_arrays(dev["y"], *dev[m], balanced=objective != objectives[0])[0] for m in METRICS}
        if objective == objectives[2]:
            held = scores(*dev["answer_relevance"], cuts["answer_relevance"]) * 1.0
            cuts["groundedness"] = fit_gate_cuts(dev["y"], held, *dev["groundedness"])
        if objective == objectives[3]:
            cuts["groundedness"] = released_cuts(args.cell, "groundedness")
            held = scores(*dev["groundedness"], cuts["groundedness"]) * 1.0
            cuts["answer_relevance"] = fit_relevance_cuts(dev["y"], *dev["answer_relevance"], held)
        section = {"cuts": cuts, "dev": measure(dev, cuts), "test": measure(test, cuts)}
        report["objectives"][objective] = section
        for split in ("dev", "test"):
            for name, f in section[split].items():
                recall = f["recall"]
                rows.append(
                    [objective, split, name, f["spearman"], f["kappa_quadratic"], recall["C"], recall["P"],
                     recall["I"], f["balanced_accuracy"]]
                )  # fmt: skip
        print(f"{objective}: " + "; ".join(f"{m} cuts {list(c)}" for m, c in cuts.items()))
    header = ["objective", "split", "grade", "ρ", "quadratic κ", "C→C", "P→P", "I→I", "balanced acc."]
    print(table(rows, header))
    save(args.name, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
