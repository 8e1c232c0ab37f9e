"""Answer relevance split from completeness, measured on saved judgements without the engine.

The default answer relevance (checks-17, on checks-14's conversations; checks-8 before them) multiplies its item
checks (answers the question, specific, only an answer) by *covers*, how many of the judge's own reference points the
answer states: a relevant answer that leaves points out sinks, and relevance becomes completeness. Here the same
recorded checks are read three ways, each by its prompt's own rule (juiz.judging.check_rule):

- relevance alone (`--relevance`: `answer_relevance@checks-15`, checks-14 without covers and its weights);
- completeness (`--completeness`: `completeness@checks-3`, covers weighted by point_needed, each point read half from
  the judge and half from its words as checks-17 reads it, a metric of its own);
- the verdict over the triad (`TRIAD_VERDICT`: C when relevance, completeness and groundedness all reach score 3, P
  when relevance reaches 2 and groundedness 3), against today's verdict (`--whole` and `--grounded`,
  DEFAULT_VERDICT).

Each pair of versions asks the same conversations as the whole answer relevance it splits (checks-9 and
completeness@checks-1 split checks-8: `--dev dev_checks-8.jsonl.gz --test test_checks-9.jsonl.gz --whole checks-8
--grounded checks-4 --relevance checks-9 --completeness checks-1 --name relevance_split` is the 2026-11-28 reading).

Every cut is fitted on dev (relevance's cut for score 2 by balanced accuracy of relevant vs not; the other cuts by
the verdict's quadratic κ with every class weighted equally; completeness's cut for score 1 by its own ρ) and read by
5-fold cross-validation by topic on dev; test is read once with the dev cuts. Relevance-only labels: correct and
partial answers address the question (relevant); off-topic, refusals, word salad (the question's words in circles),
rubric quotes and injected or hostile answers do not; false answers address the question but their labels say they
are wrong, not whether they are relevant, so they are left out of the relevance figures (and counted as relevant in
a second row).

    .venv/bin/python -m bench.relevance_split [--dev JUDGEMENTS] [--test JUDGEMENTS] [--name NAME]

Writes bench/results/relevance_split_<whole>.json (or NAME.json).
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import balanced_accuracy_score, cohen_kappa_score

import prompts
from bench.check_report import GRID, fit_cut_arrays
from bench.common import RESULTS, save, table
from bench.judge_quality import CORRECT, FALSE, FALSE_IN_CONTEXT, INJECTED, REFUSALS, _auc, _spearman
from bench.labelled import CLASSES, read_judgements
from bench.rule_fit import scores
from juiz.agreement.labels import DEFAULT_VERDICT, TRIAD_VERDICT
from juiz.agreement.statistics import compute_agreement, metric_signal, verdict_signal
from juiz.judging.check_rule import apply_rule, banded
from juiz.judging.word_overlap import with_counted
from schemas import Judgement
from schemas.judgement import MetricResult, MetricStatus
from schemas.labels import LabelClass, LabelMapping

JUDGEMENTS = RESULTS / "judgements"
# The default judge's gradings: checks-13 asks checks-14's (and checks-17's) conversations.
DEV = JUDGEMENTS / "dev_checks-13.jsonl.gz"
TEST = JUDGEMENTS / "test_checks-14.jsonl.gz"


@dataclass(frozen=True)
class Reading:
    """The prompt versions a recorded grading's checks are read under (each asks a subset of `whole`'s
    conversations)."""

    whole: str = "checks-17"  # today's answer relevance
    grounded: str = "checks-8"
    relevance: str = "checks-15"  # answer relevance alone
    completeness: str = "checks-3"

    @property
    def today(self) -> dict[str, str]:
        return {"answer_relevance": self.whole, "groundedness": self.grounded}


RELEVANT = CORRECT | {"partial"}
NOT_RELEVANT = {"off_topic", "word_salad", "quotes_rubric"} | REFUSALS | INJECTED
# Relevance alone: two classes on the judge's scale, relevant from score 2 (P or C under the default mapping).
BINARY = LabelMapping(
    classes=[
        LabelClass(name="not relevant", scores=[0, 1]),
        LabelClass(name="relevant", scores=[2, 3]),
    ]
)
FOLDS = 5


@dataclass
class Split:
    """One split's items: labels, categories, topics, and per prompt the rule's strength and veto for each item."""

    judgements: list[Judgement]
    y: np.ndarray
    category: list[str]
    topic: list[str]
    strength: dict[str, np.ndarray]
    vetoed: dict[str, np.ndarray]


def load(path: Path, reading: Reading) -> Split:
    judgements = read_judgements(path)
    extra = [j.model_extra or {} for j in judgements]
    strength: dict[str, list[float]] = {}
    vetoed: dict[str, list[bool]] = {}
    read_as = {
        "answer_relevance": ("answer_relevance", reading.whole),
        "groundedness": ("groundedness", reading.grounded),
        "relevance": ("answer_relevance", reading.relevance),
        "completeness": ("completeness", reading.completeness),
    }
    for j in judgements:
        for key, (metric, version) in read_as.items():
            recorded = (j.metrics or {})["answer_relevance" if metric == "completeness" else metric]
            assert recorded.provenance is not None and recorded.checks is not None, f"{j.id}: {metric} has no checks"
            lang = prompts.parse_prompt_id(recorded.provenance.prompt)[2] or "en"
            template = prompts.load(metric, version, lang)
            outcome = apply_rule(template, with_counted(template, recorded.checks, j.question, j.answer))
            assert outcome.ok and outcome.strength is not None, f"{j.id}: {key} is not graded: {outcome.error}"
            strength.setdefault(key, []).append(outcome.strength)
            vetoed.setdefault(key, []).append("vetoed:" in outcome.supporting_evidence)
    return Split(
        judgements=judgements,
        y=np.array([CLASSES[str(j.manual_label)] for j in judgements]),
        category=[str(e["category"]) for e in extra],
        topic=[str(e["topic"]) for e in extra],
        strength={k: np.array(v) for k, v in strength.items()},
        vetoed={k: np.array(v) for k, v in vetoed.items()},
    )


Cuts = dict[str, tuple[float, float, float]]


def today_cuts(reading: Reading) -> Cuts:
    """The released rules' cuts (today's answer relevance and groundedness): nothing is refitted."""
    out: Cuts = {}
    for key, version in reading.today.items():
        rule = prompts.load(key, version, "en").rule
        assert rule is not None
        out[key] = rule.cuts
    return out


def relevant_of(split: Split, rows: Sequence[int], false_relevant: bool = False) -> tuple[list[int], np.ndarray]:
    """The rows with a relevance-only label, and the label (1 relevant)."""
    yes = RELEVANT | (FALSE if false_relevant else set())
    no = NOT_RELEVANT
    kept = [i for i in rows if split.category[i] in yes | no]
    return kept, np.array([int(split.category[i] in yes) for i in kept])


def verdict_of(by_metric: dict[str, np.ndarray]) -> np.ndarray:
    """A verdict rule's class (0 I, 1 P, 2 C): the first level of TRIAD_VERDICT (with completeness) or DEFAULT_VERDICT
    whose minimums every metric meets."""
    rule = TRIAD_VERDICT if "completeness" in by_metric else DEFAULT_VERDICT
    out = np.zeros(len(next(iter(by_metric.values()))), dtype=int)
    for level in reversed(rule):
        met = np.all([by_metric[m] >= minimum for m, minimum in level.when.items()], axis=0)
        out = np.where(met, CLASSES[level.label], out)
    return out


def triad_scores(split: Split, rows: Sequence[int], cuts: Cuts) -> dict[str, np.ndarray]:
    return {
        "answer_relevance": scores(
            split.strength["relevance"][rows], split.vetoed["relevance"][rows], cuts["relevance"]
        ),
        "completeness": scores(
            split.strength["completeness"][rows], split.vetoed["completeness"][rows], cuts["completeness"]
        ),
        "groundedness": scores(
            split.strength["groundedness"][rows], split.vetoed["groundedness"][rows], cuts["groundedness"]
        ),
    }


def fit(split: Split, rows: Sequence[int], reading: Reading) -> Cuts:
    """The triad's cuts from these (dev) rows; groundedness keeps its released cuts."""
    rows = list(rows)
    y = split.y[rows]
    weights = (len(y) / (3 * np.bincount(y, minlength=3)))[y]
    x_rel, v_rel = split.strength["relevance"][rows], split.vetoed["relevance"][rows]
    # Relevance's score 2: the cut that best tells relevant from not (balanced accuracy), the middle of the best run.
    kept, binary = relevant_of(split, rows)
    index = [rows.index(i) for i in kept]

    def accuracy_at(c: float) -> float:
        said = (~v_rel[index]) & (x_rel[index] >= c)
        return float(balanced_accuracy_score(binary, said.astype(int)))

    grid = [float(c) for c in GRID]
    values = [accuracy_at(c) for c in grid]
    best_runs = [c for c, v in zip(grid, values, strict=True) if v == max(values)]
    c2 = best_runs[len(best_runs) // 2]
    grounded = today_cuts(reading)["groundedness"]
    # Completeness's own cuts first (its ρ picks the cut for score 1), then the verdict's C gates.
    own, _, _ = fit_cut_arrays(
        y, split.strength["completeness"][rows], split.vetoed["completeness"][rows], balanced=True
    )
    own_c1 = float(own[0])

    def triad_cuts(rel3: float, co2: float, co3: float) -> Cuts:
        return {
            "relevance": (min(grid[0], c2), c2, rel3),
            "completeness": (min(own_c1, co2), co2, co3),
            "groundedness": grounded,
        }

    def kappa_of(rel3: float, co2: float, co3: float) -> float:
        decided = verdict_of(triad_scores(split, rows, triad_cuts(rel3, co2, co3)))
        return float(cohen_kappa_score(y, decided, weights="quadratic", labels=[0, 1, 2], sample_weight=weights))

    coarse = [c for c in grid if round(c * 100) % 2 == 0]
    candidates = [
        (r3, co2, co3)
        for r3 in coarse
        if r3 >= c2
        for co2, co3 in itertools.combinations([round(grid[0] - 0.01, 2), *coarse], 2)
    ]
    return triad_cuts(*max(candidates, key=lambda c: (kappa_of(*c), -(c[2] - c[1]), -c[0])))


def as_judgements(split: Split, rows: Sequence[int], cuts: Cuts, today: Cuts) -> list[Judgement]:
    """The rows as results the agreement code reads: today's metrics and the triad's, scores by the cuts."""
    out = []
    for i in rows:
        metrics: dict[str, MetricResult] = {}
        for name, key, chosen in (
            ("answer_relevance", "answer_relevance", today),
            ("groundedness", "groundedness", today),
            ("relevance", "relevance", cuts),
            ("completeness", "completeness", cuts),
        ):
            strength, vetoed = split.strength[key][i], bool(split.vetoed[key][i])
            score = int(scores(np.array([strength]), np.array([vetoed]), chosen[key])[0])
            expected = banded(strength, chosen[key], 0.5 if vetoed else None)
            metrics[name] = MetricResult(status=MetricStatus.OK, score=score, expected_score=round(expected, 6))
        out.append(split.judgements[i].model_copy(update={"metrics": metrics}))
    return out


def _stat(report: Any, name: str) -> float | None:
    value = getattr(report, name).value
    return None if value is None else round(float(value), 3)


def agreement_row(judgements: list[Judgement], mapping: LabelMapping, signal: Any) -> dict[str, Any]:
    report = compute_agreement(judgements, mapping, resamples=0, signal=signal)
    return {
        "n": report.n,
        "accuracy": _stat(report, "accuracy"),
        "kappa_quadratic": _stat(report, "cohen_kappa_quadratic"),
        "spearman": _stat(report, "spearman_rho"),
        "confusion_matrix": report.confusion_matrix,
    }


def relevance_rows(
    judgements: list[Judgement], split: Split, rows: Sequence[int], false_relevant: bool, reading: Reading
) -> dict:
    """Relevance alone against relevance-only labels: today's answer relevance and relevance alone, by the expected
    score (AUC) and at each one's score 2 (balanced accuracy, κ)."""
    kept, binary = relevant_of(split, rows, false_relevant)
    position = {i: n for n, i in enumerate(rows)}
    chosen = [judgements[position[i]] for i in kept]
    labelled = [
        j.model_copy(update={"manual_label": "relevant" if b else "not relevant"})
        for j, b in zip(chosen, binary, strict=True)
    ]
    out: dict[str, Any] = {}
    for name, metric in (
        (f"{reading.whole} answer relevance", "answer_relevance"),
        (f"{reading.relevance} relevance alone", "relevance"),
    ):
        expected = [float((j.metrics or {})[metric].expected_score or 0.0) for j in labelled]
        said = [int(((j.metrics or {})[metric].score or 0) >= 2) for j in labelled]
        row = agreement_row(labelled, BINARY, metric_signal(metric, BINARY))
        out[name] = {
            "n": len(labelled),
            "auc": _auc(list(binary), expected),
            "balanced_accuracy": round(float(balanced_accuracy_score(binary, said)), 3),
            "kappa": row["kappa_quadratic"],
            "relevant_graded_relevant": round(float(np.mean([s for s, b in zip(said, binary, strict=True) if b])), 3),
            "not_relevant_graded_not": round(
                float(np.mean([1 - s for s, b in zip(said, binary, strict=True) if not b])), 3
            ),
        }
    return out


def shares(split: Split, rows: Sequence[int], decided: Sequence[int]) -> dict[str, float]:
    def share(group: set[str], cls: int) -> float:
        chosen = [d for d, i in zip(decided, rows, strict=True) if split.category[i] in group]
        return round(float(np.mean([d == cls for d in chosen])), 3) if chosen else float("nan")

    return {
        "correct_as_C": share(CORRECT, 2),
        "partial_as_P": share({"partial"}, 1),
        "refusal_injected_as_I": share(REFUSALS | INJECTED, 0),
        "false_in_context_as_I": share(FALSE_IN_CONTEXT, 0),
        "false_not_in_context_as_I": share({"false_not_in_context"}, 0),
        "off_topic_word_salad_as_I": share({"off_topic", "word_salad"}, 0),
    }


def measure(split: Split, rows: Sequence[int], cuts: Cuts, reading: Reading) -> dict[str, Any]:
    today = today_cuts(reading)
    verdict_today = f"verdict, today ({reading.whole} + {reading.grounded})"
    completeness = f"completeness {reading.completeness}"
    judgements = as_judgements(split, rows, cuts, today)
    mapping = LabelMapping()
    today_rule = mapping.model_copy(update={"verdict": list(DEFAULT_VERDICT)})
    triad = mapping.model_copy(update={"verdict": list(TRIAD_VERDICT)})
    # the triad's verdict reads relevance alone under answer relevance's name
    as_triad = [
        j.model_copy(update={"metrics": {**(j.metrics or {}), "answer_relevance": (j.metrics or {})["relevance"]}})
        for j in judgements
    ]
    out: dict[str, Any] = {
        verdict_today: agreement_row(judgements, today_rule, verdict_signal(today_rule)),
        "verdict, triad (relevance + completeness + groundedness)": agreement_row(
            as_triad, triad, verdict_signal(triad)
        ),
        f"answer relevance {reading.whole}": agreement_row(
            judgements, mapping, metric_signal("answer_relevance", mapping)
        ),
        completeness: agreement_row(judgements, mapping, metric_signal("completeness", mapping)),
        f"answer relevance {reading.relevance}, relevance alone (vs C/P/I)": agreement_row(
            judgements, mapping, metric_signal("relevance", mapping)
        ),
    }
    today_classes = verdict_of(
        {m: scores(split.strength[m][rows], split.vetoed[m][rows], today[m]) for m in reading.today}
    )
    triad_classes = verdict_of(triad_scores(split, rows, cuts))
    out[verdict_today]["categories"] = shares(split, rows, list(today_classes))
    out["verdict, triad (relevance + completeness + groundedness)"]["categories"] = shares(
        split, rows, list(triad_classes)
    )
    out["relevance"] = relevance_rows(judgements, split, rows, False, reading)
    out["relevance, false answers as relevant"] = relevance_rows(judgements, split, rows, True, reading)
    c_rows = [n for n, i in enumerate(rows) if split.y[i] >= 1]
    co_expected = [float((judgements[n].metrics or {})["completeness"].expected_score or 0.0) for n in c_rows]
    out[completeness]["auc_correct_vs_partial"] = _auc([int(split.y[rows[n]] == 2) for n in c_rows], co_expected)
    return out


def cross_validated(split: Split, reading: Reading) -> dict[str, Any]:
    """Each fold's cuts fitted on the other topics; the verdict and the relevance cut read on the held topics."""
    topics = sorted(set(split.topic))
    rows = list(range(len(split.y)))
    triad = np.zeros(len(rows), dtype=int)
    relevant = np.zeros(len(rows), dtype=int)
    for k in range(FOLDS):
        held = {t for n, t in enumerate(topics) if n % FOLDS == k}
        train = [i for i in rows if split.topic[i] not in held]
        test = [i for i in rows if split.topic[i] in held]
        cuts = fit(split, train, reading)
        triad[test] = verdict_of(triad_scores(split, test, cuts))
        relevant[test] = triad_scores(split, test, cuts)["answer_relevance"] >= 2
    kept, binary = relevant_of(split, rows)
    return {
        "verdict": {
            "spearman": _spearman([float(t) for t in split.y], [float(d) for d in triad]),
            "kappa_quadratic": round(float(cohen_kappa_score(split.y, triad, weights="quadratic")), 3),
            "categories": shares(split, rows, list(triad)),
        },
        "relevance_balanced_accuracy": round(float(balanced_accuracy_score(binary, relevant[kept])), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dev", type=Path, default=DEV)
    parser.add_argument("--test", type=Path, default=TEST)
    default = Reading()
    parser.add_argument("--whole", default=default.whole, help="today's answer relevance version")
    parser.add_argument("--grounded", default=default.grounded, help="today's groundedness version")
    parser.add_argument("--relevance", default=default.relevance, help="answer relevance alone")
    parser.add_argument("--completeness", default=default.completeness)
    parser.add_argument("--name", help="the results file's name (default relevance_split_<whole>)")
    args = parser.parse_args(argv)
    reading = Reading(args.whole, args.grounded, args.relevance, args.completeness)
    dev, test = load(args.dev, reading), load(args.test, reading)
    cuts = fit(dev, range(len(dev.y)), reading)
    report: dict[str, Any] = {
        "dev": args.dev.name,
        "test": args.test.name,
        "cuts": {k: [float(c) for c in v] for k, v in cuts.items()},
        "reading": {
            "answer_relevance": reading.whole,
            "groundedness": reading.grounded,
            "relevance": reading.relevance,
            "completeness": reading.completeness,
        },
        "today_cuts": {k: [float(c) for c in v] for k, v in today_cuts(reading).items()},
        "dev_cross_validated": cross_validated(dev, reading),
        "splits": {
            "dev": measure(dev, range(len(dev.y)), cuts, reading),
            "test": measure(test, range(len(test.y)), cuts, reading),
        },
    }
    released = {
        "relevance": prompts.load("answer_relevance", reading.relevance, "en").rule,
        "completeness": prompts.load("completeness", reading.completeness, "en").rule,
    }
    report["released_cuts_match"] = all(rule is not None and rule.cuts == cuts[key] for key, rule in released.items())
    print(
        "cuts fitted on dev:", report["cuts"], "(the released prompts' cuts)" if report["released_cuts_match"] else ""
    )
    print("dev, 5-fold by topic:", report["dev_cross_validated"])
    rows = []
    for split_name, figures in report["splits"].items():
        for name, row in figures.items():
            if name.startswith("relevance"):  # relevant vs not
                for grade, r in row.items():
                    rows.append([split_name, f"{name}: {grade}", r["n"], r["auc"], r["balanced_accuracy"], r["kappa"],
                                 "", "", ""])  # fmt: skip
                continue
            cat = row.get("categories", {})
            rows.append(
                [split_name, name, row["n"], row.get("auc_correct_vs_partial", ""), row["accuracy"],
                 row["kappa_quadratic"], row["spearman"], cat.get("correct_as_C", ""),
                 cat.get("refusal_injected_as_I", "")]
            )  # fmt: skip
    header = ["split", "grade", "n", "AUC", "acc. (bal. for relevance)", "quadratic κ", "ρ", "correct→C", "ref+inj→I"]
    print(table(rows, header))
    for split_name, figures in report["splits"].items():
        for name, row in figures.items():
            if "categories" in row:
                print(split_name, name, row["categories"])
    save(args.name or f"relevance_split_{reading.whole}", report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
