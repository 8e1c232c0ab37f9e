"""Each yes/no check on its own against the manual labels: may it veto, and how much does it carry?

Reads the results `bench.judge_quality --save-judgements` wrote for a split (bench/work/judgements/<split>_<cell>.jsonl)
and prints, per check: how often it was read (not low mass), its mean P(yes) per manual class, Spearman ρ with the
class, ROC AUC for "C vs rest" and for "not I vs I". A check whose ρ is negative is inverted (the judge says yes to
it for worse answers): it must not veto. This is how the rule's vetoes were chosen on the dev split (README, "Judge
quality"); never on test.

    .venv/bin/python -m bench.check_report [--split dev] [--cell checks-2] [--fit-cuts]

--fit-cuts: the rule's cuts that agree best with the split's labels (dev only), per metric: the strength each item
reached under the rule (min of the core checks' mean and the vetoes) is kept; the cuts for scores 2 and 3 (P and C
under the default mapping) are searched on a grid for the best quadratic κ, the cut for score 1 for the best ρ.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import statistics
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
from sklearn.metrics import cohen_kappa_score

import prompts
from bench.common import WORK, table
from bench.judge_quality import _auc, _spearman
from bench.labelled import CLASSES
from juiz.calibration.features import check_feature
from juiz.judging.check_rule import apply_rule
from schemas import Judgement
from schemas.judgement import MetricStatus


def load(split: str, cell: str) -> list[Judgement]:
    path = WORK / "judgements" / f"{split}_{cell}.jsonl"
    return [Judgement.model_validate_json(line) for line in path.read_text(encoding="utf-8").splitlines()]


def rows(results: list[Judgement]) -> list[list[object]]:
    out = []
    names: dict[tuple[str, str], str] = {}
    for r in results:
        for metric, m in (r.metrics or {}).items():
            for c in m.checks or []:
                names.setdefault((metric, c.name), c.role)
    for (metric, name), role in names.items():
        labels, values, by_class = [], [], defaultdict(list)
        unread = 0
        for r in results:
            m = (r.metrics or {}).get(metric)
            if m is None or m.status is not MetricStatus.OK or r.manual_label is None:
                continue
            value = check_feature(m, name)
            if value is None:
                unread += 1
                continue
            label = CLASSES[str(r.manual_label)]
            labels.append(label)
            values.append(value)
            by_class[label].append(value)
        means = [round(statistics.fmean(by_class[k]), 2) if by_class[k] else "-" for k in (0, 1, 2)]
        out.append(
            [
                metric,
                name,
                role,
                len(values),
                unread,
                *means,
                _spearman([float(v) for v in labels], values),
                _auc([int(y == 2) for y in labels], values),
                _auc([int(y > 0) for y in labels], values),
            ]
        )
    return out


GRID = [round(x, 2) for x in np.arange(0.30, 0.96, 0.01)]


def _strengths(results: list[Judgement], metric: str) -> tuple[list[int], list[float], list[bool], str]:
    """Per labelled item: class, the rule's strength, vetoed; and the prompt id."""
    labels, strengths, vetoed = [], [], []
    prompt_id = ""
    for r in results:
        m = (r.metrics or {}).get(metric)
        if m is None or m.status is not MetricStatus.OK or r.manual_label is None or m.provenance is None:
            continue
        prompt_id = m.provenance.prompt
        name, rest = prompt_id.split("@", 1)
        version, lang = rest.rsplit(".", 1)
        template = prompts.load(name, version, lang)
        assert template.rule is not None
        # vetoed ⇔ score 0 whatever the cuts: re-apply with cuts that any strength passes
        outcome = apply_rule(template, m.checks or [])
        lowest = dataclasses.replace(template, rule=dataclasses.replace(template.rule, cuts=(0.0, 0.0, 0.0)))
        labels.append(CLASSES[str(r.manual_label)])
        strengths.append(float(outcome.expected_score or 0.0))
        vetoed.append(apply_rule(lowest, m.checks or []).score == 0)
    return labels, strengths, vetoed, prompt_id


def fit_cuts(
    results: list[Judgement], metric: str, *, balanced: bool = False
) -> tuple[tuple[float, float, float], float, float | None]:
    labels, strengths, vetoed, _ = _strengths(results, metric)
    return fit_cut_arrays(np.array(labels), np.array(strengths), np.array(vetoed), balanced=balanced)


def fit_cut_arrays(
    y: np.ndarray, x: np.ndarray, v: np.ndarray, *, balanced: bool = False, grid: Sequence[float] = GRID
) -> tuple[tuple[float, float, float], float, float | None]:
    """Cuts for classes (0 I, 1 P, 2 C) from strengths x and vetoes v: the best quadratic κ for the cuts of scores 2
    and 3, then the best ρ for score 1's. `balanced` weighs each item by n / (3·n_class), so every class counts
    equally (unweighted, a split of mostly I rewards never saying C)."""
    weights = (len(y) / (3 * np.bincount(y, minlength=3)))[y] if balanced else None

    def label_of(c2: float, c3: float) -> np.ndarray:
        return np.where(v, 0, np.where(x >= c3, 2, np.where(x >= c2, 1, 0)))

    def kappa_of(c2: float, c3: float) -> float:
        return float(
            cohen_kappa_score(y, label_of(c2, c3), weights="quadratic", labels=[0, 1, 2], sample_weight=weights)
        )

    best = max(itertools.combinations(grid, 2), key=lambda c: (kappa_of(*c), -(c[1] - c[0])))

    def score_of(c1: float) -> list[float]:
        return [0.0 if vv else float(sum(s >= c for c in (c1, *best))) for s, vv in zip(x, v, strict=True)]

    # The lowest pair may start at the grid's floor: score 1 then has no room of its own.
    c1 = max(
        (c for c in grid if c < best[0]),
        key=lambda c: _spearman([float(t) for t in y], score_of(c)) or -1.0,
        default=best[0],
    )
    return (c1, *best), round(kappa_of(*best), 3), _spearman([float(t) for t in y], score_of(c1))


def _ordinal_proba(train_x: np.ndarray, train_y: np.ndarray, x: np.ndarray, n: int) -> np.ndarray:
    """Frank & Hall: one binary model per cut "class > k"; class probabilities from the differences."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    above = []
    for k in range(n - 1):
        target = (train_y > k).astype(int)
        model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=1000)).fit(train_x, target)
        above.append(model.predict_proba(x)[:, 1])
    for k in range(1, len(above)):  # keep the cumulative probabilities monotone
        above[k] = np.minimum(above[k], above[k - 1])
    cumulative = [np.ones(len(x)), *above, np.zeros(len(x))]
    return np.stack([cumulative[k] - cumulative[k + 1] for k in range(n)], axis=1)


def calibration_models(results: list[Judgement]) -> list[list[object]]:
    """Cross-fitted (5 folds): multinomial, multinomial with balanced class weights, ordinal; same features."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from juiz.calibration.features import labelled_features
    from schemas import LabelMapping

    data = labelled_features(results, LabelMapping())
    x, y, n = data.features, data.labels, 3
    variants: dict[str, object] = {"multinomial": None, "multinomial, balanced": "balanced", "ordinal": "ordinal"}
    rows: list[list[object]] = []
    for name, kind in variants.items():
        proba = np.zeros((len(y), n))
        for train, held in StratifiedKFold(n_splits=5, shuffle=True, random_state=0).split(x, y):
            if kind == "ordinal":
                proba[held] = _ordinal_proba(x[train], y[train], x[held], n)
            else:
                model = make_pipeline(
                    StandardScaler(),
                    LogisticRegression(C=1.0, max_iter=1000, class_weight=kind),  # type: ignore[arg-type]
                ).fit(x[train], y[train])
                proba[np.ix_(held, model.classes_)] = model.predict_proba(x[held])
        predicted = proba.argmax(axis=1)
        expected = proba @ np.arange(n)
        rows.append(
            [
                name,
                len(y),
                len(data.names),
                round(float(np.mean(predicted == y)), 3),
                round(float(cohen_kappa_score(y, predicted, weights="quadratic")), 3),
                _spearman([float(t) for t in y], [float(e) for e in expected]),
            ]
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="dev")
    parser.add_argument("--cell", default="checks-2")
    parser.add_argument("--fit-cuts", action="store_true", help="the rule's cuts that agree best with the labels")
    parser.add_argument(
        "--calibration-models", action="store_true", help="multinomial vs balanced vs ordinal (cross-fitted)"
    )
    args = parser.parse_args(argv)
    if args.calibration_models:
        header = ["model", "n", "features", "accuracy", "quadratic κ", "ρ (expected class)"]
        print(table(calibration_models(load(args.split, args.cell)), header))
        return 0
    if args.fit_cuts:
        if args.split != "dev":
            parser.error("cuts are fitted on dev only")
        results = load(args.split, args.cell)
        for metric in ("answer_relevance", "groundedness"):
            cuts, kappa, rho = fit_cuts(results, metric)
            print(f"{metric}: cuts = {list(cuts)}  (dev: quadratic κ {kappa}, ρ {rho})")
        return 0
    header = ["metric", "check", "role", "n", "unread", "P I", "P P", "P C", "ρ", "AUC C", "AUC ¬I"]
    print(table(rows(load(args.split, args.cell)), header))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
