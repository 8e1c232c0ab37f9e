"""Variants of answer relevance's check rule, measured on recorded runs without the engine: each variant's cuts fitted
on dev, its agreement read by 5-fold cross-validation by topic on dev, then once on a recorded test run.

    .venv/bin/python -m bench.rule_variants [--dev RESULT.json] [--test RESULT.json] [--cell checks-7]

A variant recombines the checks a run already asked (the evidence line `juiz.judging.check_rule` writes: each check's
value,
each sentence's and each point's), so a design that only drops a check or changes how the checks combine is measured
on the very replies the released rule graded; groundedness keeps its recorded score. Variants:
- `released`: the rule as released, cuts refitted (it must reproduce the recorded figures);
- `without <check>`: one core check left out of the core mean;
- `softer veto`: no hard veto between 0.4 and 0.6 of the weakest veto check; the strength is scaled by where the value
  sits in that band (a flag that moves by one step of the engine's bf16 resolution, ~0.03, moves the grade a little,
  not from 0 to 3). Hard below 0.4.
`stability` counts verdicts that move when every veto value moves by ±0.03 (moved; of them, by two classes).
Writes bench/results/rule_variants.json.

It re-implements rule-6's combination (an unweighted covers mean, the veto read raw), so it reads checks-6's and
checks-7's runs only; checks-8's weighted covers and baselined veto are recombined by `juiz.judging.check_rule` itself
in `bench.rule_fit` on saved judgements.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import prompts
from bench.check_report import GRID, fit_cut_arrays
from bench.common import RESULTS, save
from bench.judge_quality import CORRECT, FALSE_IN_CONTEXT, INJECTED, REFUSALS
from bench.labelled import CLASSES
from bench.rule_fit import figures, scores, verdict

# The cells whose answer relevance rule-6 grades (Variant.strength re-implements it).
READABLE_CELLS = ("checks-6", "checks-7")
DEV = RESULTS / "judge_quality_dev_checks-7.json"
TEST = RESULTS / "judge_quality_test_checks-7_cot-v2.json"
# Soft strengths reach below the released rules' grid, which starts at 0.30.
WIDE_GRID = [round(x, 2) for x in np.arange(0.05, GRID[-1] + 0.001, 0.01)]
# One check as the evidence shows it: name, "(yes = bad)", the judge's word, its P, and each sentence's or point's.
_SHOWN = re.compile(
    r"(?P<name>\w+)(?P<bad> \(yes = bad\))? (?:yes|no) (?P<p>[0-9.]+)(?: \(\w+ of \d+ [\w ]+: (?P<each>[0-9., ]+)\))?"
)
STEP = 0.03

Checks = dict[str, list[float]]  # check name → its values (one, or one per sentence / point), yes = good


def read_checks(reply: str) -> Checks:
    """Each check's values from a graded reply's `Supporting Evidence:` line (P(no) for a check where yes is bad)."""
    evidence = reply.split("\n")[1].removeprefix("Supporting Evidence: ")
    checks: Checks = {}
    for part in evidence.split("; "):
        if (m := _SHOWN.fullmatch(part)) is None:
            continue
        shown = [float(x) for x in m["each"].split(", ")] if m["each"] else [float(m["p"])]
        checks[m["name"]] = [1.0 - p for p in shown] if m["bad"] else shown
    return checks


def load(path: Path, cell: str) -> dict[str, Any]:
    """A recorded run's labels, topics, answer relevance's checks and vetoes, and groundedness's recorded score."""
    replies = json.loads(path.read_text(encoding="utf-8"))["replies"][cell]
    grounded = prompts.load("groundedness", "checks-4", "en").rule
    assert grounded is not None
    g = [r["verdict_inputs"]["groundedness"] for r in replies]
    return {
        "y": np.array([CLASSES[r["label"]] for r in replies]),
        "category": [r["category"] for r in replies],
        "topic": [r["id"].rsplit("-q", 1)[0] for r in replies],
        "checks": [read_checks(r["verdict_inputs"]["answer_relevance"]["reply"]) for r in replies],
        "vetoed": ["vetoed:" in r["verdict_inputs"]["answer_relevance"]["reply"] for r in replies],
        "groundedness": scores(
            np.array([float(i["strength"]) for i in g]), np.array(["vetoed:" in i["reply"] for i in g]), grounded.cuts
        ),
    }


@dataclass(frozen=True)
class Variant:
    """Rule-6 (juiz.judging.check_rule) over these core checks; with `soft`, the veto band (low, high) described
    above."""

    core: tuple[str, ...]
    soft: tuple[float, float] | None = None

    @property
    def grid(self) -> Sequence[float]:
        return WIDE_GRID if self.soft else GRID

    def strength(self, checks: Checks, shift: float) -> tuple[float, bool]:
        gate = min(min(checks["attempts_answer"]), min(checks["sentence_to_grader"])) + shift
        scaled = statistics.fmean(checks[c][0] for c in self.core) * statistics.fmean(checks["covers"])
        if self.soft is None:
            return min(scaled, gate), gate < 0.5
        low, high = self.soft
        return scaled * min(max((gate - low) / (high - low), 0.0), 1.0), gate < low


def graded(run: dict[str, Any], variant: Variant, rows: list[int], cuts: tuple[float, ...], shift: float = 0.0) -> Any:
    """The verdict the variant gives these rows with these cuts. Where the veto is the released one and nothing
    moves, the recorded veto: the evidence rounds to two decimals, and a value shown as 0.50 may have been under."""
    pairs = [variant.strength(run["checks"][i], shift) for i in rows]
    recorded = variant.soft is None and shift == 0.0
    vetoed = np.array([run["vetoed"][i] if recorded else v for i, (_, v) in zip(rows, pairs, strict=True)])
    relevance = scores(np.array([s for s, _ in pairs]), vetoed, cuts)
    return verdict({"answer_relevance": relevance.astype(float), "groundedness": run["groundedness"][rows] * 1.0})


def fit(run: dict[str, Any], variant: Variant, rows: list[int]) -> tuple[float, ...]:
    """Cuts as rule-6's were fitted (bench.check_report.fit_cut_arrays, every class weighted equally)."""
    pairs = [variant.strength(run["checks"][i], 0.0) for i in rows]
    vetoed = [run["vetoed"][i] if variant.soft is None else v for i, (_, v) in zip(rows, pairs, strict=True)]
    x = np.array([s for s, _ in pairs])
    cuts, _, _ = fit_cut_arrays(run["y"][rows], x, np.array(vetoed), balanced=True, grid=variant.grid)
    return cuts


def shares(run: dict[str, Any], decided: Any) -> dict[str, float]:
    """The issue's per-category targets: refusals and injected answers graded I, false-in-context I, correct C."""

    def share(group: set[str], cls: int) -> float:
        chosen = [d for d, c in zip(decided, run["category"], strict=True) if c in group]
        return round(sum(d == cls for d in chosen) / len(chosen), 3)

    return {
        "refusal_injected_as_I": share(REFUSALS | INJECTED, 0),
        "false_in_context_as_I": share(FALSE_IN_CONTEXT, 0),
        "correct_as_C": share(CORRECT, 2),
    }


def cross_validated(run: dict[str, Any], variant: Variant, folds: int = 5) -> dict[str, Any]:
    topics = sorted(set(run["topic"]))
    decided = np.zeros(len(run["y"]), dtype=int)
    for k in range(folds):
        held = {t for n, t in enumerate(topics) if n % folds == k}
        train = [i for i, t in enumerate(run["topic"]) if t not in held]
        test = [i for i, t in enumerate(run["topic"]) if t in held]
        decided[test] = graded(run, variant, test, fit(run, variant, train))
    return {**figures(run["y"], decided, decided), **shares(run, decided)}


def stability(run: dict[str, Any], variant: Variant, cuts: tuple[float, ...]) -> dict[str, int]:
    rows = list(range(len(run["y"])))
    base = graded(run, variant, rows, cuts)
    moved = [graded(run, variant, rows, cuts, shift) - base for shift in (STEP, -STEP)]
    return {
        "moved": int(sum((m != 0).sum() for m in moved)),
        "two_classes": int(sum((abs(m) == 2).sum() for m in moved)),
    }


CORE = ("answers_question", "specific", "only_answer")
VARIANTS: dict[str, Variant] = {
    "released": Variant(CORE),
    **{f"without {c}": Variant(tuple(k for k in CORE if k != c)) for c in CORE},
    "softer veto": Variant(CORE, soft=(0.4, 0.6)),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dev", type=Path, default=DEV)
    parser.add_argument("--test", type=Path, default=TEST)
    parser.add_argument("--cell", default="checks-7", choices=READABLE_CELLS, help="a run graded under rule-6")
    args = parser.parse_args(argv)
    dev, test = load(args.dev, args.cell), load(args.test, args.cell)
    out: dict[str, Any] = {"dev": str(args.dev.name), "test": str(args.test.name), "cell": args.cell, "variants": {}}
    for name, variant in VARIANTS.items():
        cuts = fit(dev, variant, list(range(len(dev["y"]))))
        on_test = graded(test, variant, list(range(len(test["y"]))), cuts)
        out["variants"][name] = {
            "cuts": [float(c) for c in cuts],
            "dev_cross_validated": cross_validated(dev, variant),
            "dev_stability": stability(dev, variant, cuts),
            "test": {**figures(test["y"], on_test, on_test), **shares(test, on_test)},
        }
        row = out["variants"][name]
        cv, t = row["dev_cross_validated"], row["test"]
        print(
            f"{name:28s} cuts {row['cuts']}  dev CV: rho {cv['spearman']} qk {cv['kappa_quadratic']} "
            f"C→C {cv['correct_as_C']} refusals+injected→I {cv['refusal_injected_as_I']}  "
            f"moved {row['dev_stability']}  |  test: rho {t['spearman']} qk {t['kappa_quadratic']} "
            f"C→C {t['correct_as_C']} refusals+injected→I {t['refusal_injected_as_I']} "
            f"false-in-context→I {t['false_in_context_as_I']}"
        )
    save("rule_variants", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
