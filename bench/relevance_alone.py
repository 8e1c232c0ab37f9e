"""Answer relevance alone against relevance-only labels (issue #37), read from saved gradings without the engine.

Issue #37's target: answer relevance alone, against relevance-only judgements (correct and partial answers address
the question; off-topic, refusals, word salad, rubric quotes and injected or hostile answers do not; false answers are
left out, as in bench.relevance_split), reaches ROC AUC >= 0.9 and balanced accuracy >= 0.85 at its own cut on test.
The same recorded checks are read seven ways:

- `checks-17`, the answer relevance before checks-19 (relevance times how many key points of the judge's own answer it
  states), and `checks-19`, today's (checks-17 with a veto counted from the words on an answer that only restates the
  question), each at its released cut for score 2;
- `checks-15`, relevance alone (checks-14's conversations without the key points), cut for score 2 refitted on dev;
- `checks-18`, checks-15's conversations word for word, the grader-flag veto (sentence_to_grader against the judge's
  own points) read with a baseline margin of 0.20 instead of 0.12: a sentence a little more "grader-directed" than
  the judge's points, as Portuguese answers written for the asker often read, no longer caps a relevant answer under
  the cut (prompts/answer_relevance/checks-18);
- `checks-18 + covers max`, a research reading that is no prompt version: checks-18's three item checks and, as a
  fourth core value, the judge's P(yes) that the answer states its best-stated key point (the maximum of covers over
  the judge's own points, recorded in the same checks-14 conversations): an answer that addresses the question states
  at least one thing the judge would say, a partial answer as much as a complete one (the mean would be completeness);
- `checks-20`, checks-15 with checks-19's counted veto on restating the question, cut for score 2 refitted on dev;
- `checks-21`, checks-20 asking whether the answer addresses the question even if it leaves part out, instead of
  whether it directly answers the exact question: read only from gradings that hold that check (`bench.regrade
  --ask` adds it to a kept grading), cut for score 2 refitted on dev.

Each cut for score 2 is fitted on the dev grading by balanced accuracy (the middle of the best run on the grid, as
bench.relevance_split fits it) and read by 5-fold cross-validation by topic on dev; a second dev grading (another
engine) is read at the same cut. Dev's misgraded items are listed with their check values; test is read only as
figures (AUC on the expected score, balanced accuracy, κ, relevant graded relevant, not-relevant graded not).

    .venv/bin/python -m bench.relevance_alone [--dev J] [--dev-other J] [--test J ...] [--name NAME]

Writes bench/results/relevance_alone.json (or NAME.json).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import balanced_accuracy_score, cohen_kappa_score

import prompts
from bench.check_report import GRID
from bench.common import save, table
from bench.judge_quality import _auc
from bench.labelled import read_judgements
from bench.relevance_split import FOLDS, JUDGEMENTS, NOT_RELEVANT, RELEVANT
from juiz.judging.check_rule import apply_rule, banded, check_values, veto_values
from juiz.judging.word_overlap import with_counted
from schemas import Judgement
from schemas.judgement import CheckResult, CheckStatus

DEV = JUDGEMENTS / "dev_checks-13.jsonl.gz"
DEV_OTHER = JUDGEMENTS / "dev_checks-14_llamacpp.jsonl.gz"
TESTS = (JUDGEMENTS / "test_checks-14.jsonl.gz", JUDGEMENTS / "test_checks-14_llamacpp.jsonl.gz")
COVERS_MAX = "checks-18 + covers max"
# reading → the prompt version whose rule reads it (the research reading adds covers to checks-18's)
READINGS = {
    "checks-17": "checks-17",
    "checks-19": "checks-19",
    "checks-15": "checks-15",
    "checks-18": "checks-18",
    COVERS_MAX: "checks-18",
    "checks-20": "checks-20",
    "checks-21": "checks-21",
}
RELEASED_CUT = {"checks-17", "checks-19"}  # read at their released cuts; the others' cut is fitted on dev
ITEM_CHECKS = ("answers_question", "attempts_answer", "specific", "only_answer", "sentence_to_grader")


def covers_max(results: Sequence[CheckResult]) -> float | None:
    """The judge's P(yes) that the answer states its best-stated key point (None when no point was read)."""
    read = [r.p_yes for r in results if r.name == "covers" and r.status is CheckStatus.OK and r.p_yes is not None]
    return max(read) if read else None


def with_covers(template: prompts.PromptTemplate, results: Sequence[CheckResult]) -> tuple[float, bool]:
    """The research reading: the rule's core mean with covers max as one more core value, capped by its vetoes
    (juiz.judging.check_rule.apply_rule's strength with a fourth core check)."""
    assert template.rule is not None
    values = check_values(template, results)
    core = [values[c.name] for c in template.checks if c.role == "core" and c.name in values]
    best = covers_max(results)
    assert core and best is not None, "covers max needs the core checks and at least one covers point read"
    gates = veto_values(template, values)
    strength = min(statistics.fmean([*core, best]), min(gates.values(), default=1.0))
    return strength, any(v < template.rule.veto_below for v in gates.values())


def recorded_for(judgement: Judgement, version: str) -> bool:
    """Whether the grading holds every check this version asks (checks-21's is added to a kept grading later)."""
    recorded = (judgement.metrics or {})["answer_relevance"]
    names = {c.name for c in recorded.checks or []}
    template = prompts.load("answer_relevance", version, "en")
    return all(c.name in names for c in template.checks if c.ask != "counted")


@dataclass
class Graded:
    """One grading's relevance-labelled items: label (1 relevant), category, topic, and per reading each item's
    strength and veto; `values` keeps checks-18's check values (and covers max) for the error listing."""

    path: Path
    y: np.ndarray
    category: list[str]
    topic: list[str]
    lang: list[str]
    strength: dict[str, np.ndarray]
    vetoed: dict[str, np.ndarray]
    values: list[dict[str, float]]


def load(path: Path) -> Graded:
    y, category, topic, langs, values = [], [], [], [], []
    judgements = read_judgements(path)
    readable = [r for r in READINGS if all(recorded_for(j, READINGS[r]) for j in judgements)]
    strength: dict[str, list[float]] = {r: [] for r in readable}
    vetoed: dict[str, list[bool]] = {r: [] for r in readable}
    for j in judgements:
        extra = j.model_extra or {}
        if str(extra["category"]) not in RELEVANT | NOT_RELEVANT:
            continue
        recorded = (j.metrics or {})["answer_relevance"]
        assert recorded.provenance is not None and recorded.checks is not None, f"{j.id}: no checks"
        lang = prompts.parse_prompt_id(recorded.provenance.prompt)[2] or "en"
        for reading in readable:
            template = prompts.load("answer_relevance", READINGS[reading], lang)
            checks = with_counted(template, recorded.checks, j.question, j.answer)
            outcome = apply_rule(template, checks)
            assert outcome.ok and outcome.strength is not None, f"{j.id}: {reading}: {outcome.error}"
            if reading == COVERS_MAX:
                s, v = with_covers(template, checks)
            else:
                s, v = outcome.strength, "vetoed:" in outcome.supporting_evidence
            strength[reading].append(s)
            vetoed[reading].append(v)
        eighteen = prompts.load("answer_relevance", "checks-18", lang)
        shown = {k: round(v, 2) for k, v in check_values(eighteen, recorded.checks).items() if k in ITEM_CHECKS}
        values.append({**shown, "covers_max": round(covers_max(recorded.checks) or 0.0, 2)})
        y.append(int(str(extra["category"]) in RELEVANT))
        category.append(str(extra["category"]))
        topic.append(str(extra["topic"]))
        langs.append(lang)
    return Graded(
        path=path,
        y=np.array(y),
        category=category,
        topic=topic,
        lang=langs,
        strength={k: np.array(v) for k, v in strength.items()},
        vetoed={k: np.array(v) for k, v in vetoed.items()},
        values=values,
    )


def said_relevant(g: Graded, reading: str, cut: float, rows: np.ndarray | None = None) -> np.ndarray:
    rows = np.arange(len(g.y)) if rows is None else rows
    return ((~g.vetoed[reading][rows]) & (g.strength[reading][rows] >= cut)).astype(int)


def fit_cut(g: Graded, reading: str, rows: np.ndarray) -> float:
    """The cut for score 2 that best tells relevant from not on these rows (balanced accuracy), the middle of the
    best run on the grid (bench.relevance_split.fit)."""
    grid = [float(c) for c in GRID]
    ba = [balanced_accuracy_score(g.y[rows], said_relevant(g, reading, c, rows)) for c in grid]
    best = [c for c, v in zip(grid, ba, strict=True) if v == max(ba)]
    return best[len(best) // 2]


def cuts_of(reading: str, cut: float) -> tuple[float, float, float]:
    """The three cuts the expected score is banded by: the prompt's own, with score 2's the fitted one."""
    rule = prompts.load("answer_relevance", READINGS[reading], "en").rule
    assert rule is not None
    c1, _, c3 = rule.cuts
    return (min(c1, cut), cut, max(c3, cut))


def figures(g: Graded, reading: str, cut: float) -> dict[str, Any]:
    rule = prompts.load("answer_relevance", READINGS[reading], "en").rule
    assert rule is not None
    cuts, veto_below = cuts_of(reading, cut), rule.veto_below
    expected = [
        banded(float(s), cuts, veto_below if v else None)
        for s, v in zip(g.strength[reading], g.vetoed[reading], strict=True)
    ]
    said = said_relevant(g, reading, cut)
    return {
        "n": len(g.y),
        "cut": cut,
        "auc": _auc(list(g.y), expected),
        "balanced_accuracy": round(float(balanced_accuracy_score(g.y, said)), 3),
        "kappa": round(float(cohen_kappa_score(g.y, said)), 3),
        "relevant_graded_relevant": round(float(said[g.y == 1].mean()), 3),
        "not_relevant_graded_not": round(float(1 - said[g.y == 0].mean()), 3),
    }


def cross_validated(g: Graded, reading: str) -> float:
    """Balanced accuracy with each fold's cut fitted on the other topics (bench.relevance_split's folds)."""
    topics = sorted(set(g.topic))
    said = np.zeros(len(g.y), dtype=int)
    for k in range(FOLDS):
        held = np.array([topics.index(t) % FOLDS == k for t in g.topic])
        cut = fit_cut(g, reading, np.where(~held)[0])
        said[held] = said_relevant(g, reading, cut, np.where(held)[0])
    return round(float(balanced_accuracy_score(g.y, said)), 3)


def errors(g: Graded, reading: str, cut: float) -> list[dict[str, Any]]:
    """Dev's misgraded items under a reading, with checks-18's check values (design only: never run on test)."""
    said = said_relevant(g, reading, cut)
    return [
        {
            "error": "relevant graded not" if g.y[i] else "not relevant graded relevant",
            "category": g.category[i],
            "lang": g.lang[i],
            "topic": g.topic[i],
            "strength": round(float(g.strength[reading][i]), 3),
            "vetoed": bool(g.vetoed[reading][i]),
            **g.values[i],
        }
        for i in np.where(said != g.y)[0]
    ]


def released_or_fitted(dev: Graded, reading: str, rows: np.ndarray) -> float:
    """A released cut for score 2 (checks-17, checks-19: the default before and now), else the cut fitted on these dev
    rows."""
    if reading in RELEASED_CUT:
        rule = prompts.load("answer_relevance", READINGS[reading], "en").rule
        assert rule is not None
        return float(rule.cuts[1])
    return fit_cut(dev, reading, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dev", type=Path, default=DEV)
    parser.add_argument("--dev-other", type=Path, default=DEV_OTHER, help="a second dev grading, read at dev's cut")
    parser.add_argument("--test", type=Path, nargs="*", default=list(TESTS))
    parser.add_argument("--name", default="relevance_alone")
    args = parser.parse_args(argv)
    dev = load(args.dev)
    everything = np.arange(len(dev.y))
    readings = list(dev.strength)  # every reading the dev grading holds the checks of
    cuts = {r: released_or_fitted(dev, r, everything) for r in readings}
    report: dict[str, Any] = {
        "dev": args.dev.name,
        "dev_other": args.dev_other.name,
        "test": [p.name for p in args.test],
        "labels": {"relevant": sorted(RELEVANT), "not_relevant": sorted(NOT_RELEVANT)},
        "cuts_for_score_2": cuts,
        "dev_cross_validated_balanced_accuracy": {r: cross_validated(dev, r) for r in readings},
        "splits": {args.dev.name: {r: figures(dev, r, cuts[r]) for r in readings}},
        "dev_errors": {r: errors(dev, r, cuts[r]) for r in ("checks-15", "checks-18", COVERS_MAX)},
    }
    other = load(args.dev_other)
    report["splits"][args.dev_other.name] = {r: figures(other, r, cuts[r]) for r in readings if r in other.strength}
    report["dev_other_cross_validated_balanced_accuracy"] = {
        r: cross_validated(other, r) for r in readings if r in other.strength
    }
    for path in args.test:
        test = load(path)
        report["splits"][path.name] = {r: figures(test, r, cuts[r]) for r in readings if r in test.strength}
    print("cuts for score 2 (checks-17 and checks-19 released, the others fitted on dev):", cuts)
    print("dev, 5-fold by topic, balanced accuracy:", report["dev_cross_validated_balanced_accuracy"])
    print("dev (other engine), 5-fold by topic:", report["dev_other_cross_validated_balanced_accuracy"])
    rows = [
        [split, reading, f["n"], f["cut"], f["auc"], f["balanced_accuracy"], f["kappa"],
         f["relevant_graded_relevant"], f["not_relevant_graded_not"]]
        for split, by_reading in report["splits"].items()
        for reading, f in by_reading.items()
    ]  # fmt: skip
    print(table(rows, ["grading", "reading", "n", "cut", "AUC", "bal. acc.", "κ", "rel→rel", "not→not"]))
    for reading, listed in report["dev_errors"].items():
        print(f"dev errors, {reading}:")
        for e in listed:
            print("  ", e)
    save(args.name, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
