"""Prediction-powered shares: the estimator against simulated judges whose bias is known (the interval must cover the
true share, and be narrower than the labelled items alone give), and the path from results to the report."""

from __future__ import annotations

import numpy as np
import pytest

from juiz.agreement.compare import format_shares
from juiz.agreement.ppi import classical_mean, estimate_share_difference, estimate_shares, ppi_mean
from schemas.judgement import Judgement, JudgementStatus
from schemas.labels import LabelMapping
from tests.unit.test_agreement import PROVENANCE

SIMULATIONS = 1000
ITEMS, LABELLED = 300, 60
TRUE_SHARES = np.array([0.2, 0.3, 0.5])  # I, P, C
# Rows: the answer's true class; columns: how often the judge says I, P, C.
JUDGES = {
    "lenient (calls too much C)": np.array([[0.7, 0.2, 0.1], [0.15, 0.45, 0.4], [0.02, 0.08, 0.9]]),
    "strict (calls too little C)": np.array([[0.9, 0.08, 0.02], [0.4, 0.5, 0.1], [0.1, 0.3, 0.6]]),
}
C = 2


def simulate(confusion: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One batch: every answer's true class, the judge's class, and which items a person labelled (at random)."""
    truth = rng.choice(3, size=ITEMS, p=TRUE_SHARES)
    judged = (rng.random(ITEMS)[:, None] > confusion.cumsum(axis=1)[truth]).sum(axis=1)
    labelled = np.zeros(ITEMS, dtype=bool)
    labelled[rng.choice(ITEMS, LABELLED, replace=False)] = True
    return truth, judged, labelled


@pytest.mark.parametrize("judge", list(JUDGES))
def test_the_c_share_interval_covers_the_truth_and_is_narrower_than_the_labels_alone(judge: str) -> None:
    rng = np.random.default_rng(20261127)
    covered = 0
    widths, classical_widths, judge_alone_errors = [], [], []
    for _ in range(SIMULATIONS):
        truth, judged, labelled = simulate(JUDGES[judge], rng)
        y, f = (truth == C).astype(float), (judged == C).astype(float)
        powered = ppi_mean(y[labelled], f[labelled], f[~labelled])
        alone = classical_mean(y[labelled])
        covered += powered.low <= TRUE_SHARES[C] <= powered.high
        widths.append(powered.high - powered.low)
        classical_widths.append(alone.high - alone.low)
        judge_alone_errors.append(f.mean() - TRUE_SHARES[C])
    assert covered / SIMULATIONS >= 0.93
    assert np.mean(widths) < 0.9 * np.mean(classical_widths)
    assert np.mean(np.array(widths) < np.array(classical_widths)) > 0.9
    assert abs(np.mean(judge_alone_errors)) > 0.05  # the judge alone is biased: the correction is doing the work


def test_a_judge_that_tells_nothing_costs_next_to_nothing() -> None:
    rng = np.random.default_rng(7)
    ratios, covered = [], 0
    for _ in range(300):
        truth = rng.choice(3, size=ITEMS, p=TRUE_SHARES)
        judged = rng.choice(3, size=ITEMS)  # unrelated to the answer
        labelled = np.zeros(ITEMS, dtype=bool)
        labelled[rng.choice(ITEMS, LABELLED, replace=False)] = True
        y, f = (truth == C).astype(float), (judged == C).astype(float)
        powered, alone = ppi_mean(y[labelled], f[labelled], f[~labelled]), classical_mean(y[labelled])
        ratios.append((powered.high - powered.low) / (alone.high - alone.low))
        covered += powered.low <= TRUE_SHARES[C] <= powered.high
    assert np.mean(ratios) < 1.03  # power tuning puts λ near 0
    assert covered / 300 >= 0.92


def test_the_difference_between_two_runs_covers_the_true_change() -> None:
    rng = np.random.default_rng(11)
    judge = JUDGES["lenient (calls too much C)"]
    covered, widths, classical_widths = 0, [], []
    for _ in range(SIMULATIONS):
        # Run b answers better: a question run a answered well stays good; some others improve.
        truth_a = rng.choice(3, size=ITEMS, p=TRUE_SHARES)
        truth_b = np.where((truth_a < C) & (rng.random(ITEMS) < 0.25), C, truth_a)
        judged = [(rng.random(ITEMS)[:, None] > judge.cumsum(axis=1)[t]).sum(axis=1) for t in (truth_a, truth_b)]
        labelled = np.zeros(ITEMS, dtype=bool)
        labelled[rng.choice(ITEMS, LABELLED, replace=False)] = True
        d_truth = (truth_b == C).astype(float) - (truth_a == C).astype(float)
        d_judge = (judged[1] == C).astype(float) - (judged[0] == C).astype(float)
        powered = ppi_mean(d_truth[labelled], d_judge[labelled], d_judge[~labelled])
        alone = classical_mean(d_truth[labelled])
        true_change = 0.25 * (TRUE_SHARES[0] + TRUE_SHARES[1])
        covered += powered.low <= true_change <= powered.high
        widths.append(powered.high - powered.low)
        classical_widths.append(alone.high - alone.low)
    assert covered / SIMULATIONS >= 0.93
    assert np.mean(widths) < np.mean(classical_widths)


def result(n: int, judge_class: int | None, label: str | None) -> Judgement:
    score = None if judge_class is None else (0, 2, 3)[judge_class]
    return Judgement(
        id=f"t{n}",
        status=JudgementStatus.OK if score is not None else JudgementStatus.FAILED,
        score=score,
        normalized_score=None if score is None else score / 3,
        manual_label=label,
        provenance=PROVENANCE,
        question=f"q{n}?",
        answer=f"a{n}.",
    )


def test_estimate_shares_from_results_is_the_estimator_per_class() -> None:
    rng = np.random.default_rng(3)
    truth, judged, labelled = simulate(JUDGES["lenient (calls too much C)"], rng)
    judged_or_failed = [None if n % 50 == 0 else int(c) for n, c in enumerate(judged)]  # six failed: kept
    items = [result(n, c, "IPC"[truth[n]] if labelled[n] else None) for n, c in enumerate(judged_or_failed)]
    shares = estimate_shares(items, LabelMapping(), reference="majority")
    assert (shares.of, shares.n_items, shares.n_labelled, shares.n_ungraded) == ("share", 300, 60, 6)
    f = np.array([[c == k for k in range(3)] if c is not None else [False] * 3 for c in judged_or_failed], float)
    for k, estimate in enumerate(shares.shares):
        y = (truth == k).astype(float)
        expected = ppi_mean(y[labelled], f[labelled, k], f[~labelled, k])
        assert estimate.label == "IPC"[k]
        assert estimate.estimate == pytest.approx(expected.estimate)
        assert estimate.ci95 is not None and estimate.ci95.low == pytest.approx(max(0.0, expected.low))
        assert estimate.classical == pytest.approx(y[labelled].mean())
        assert estimate.judge_only == pytest.approx(f[:, k].mean())
    text = "\n".join(format_shares(shares))
    assert "300 items, 60 labelled items, 6 without a judge class; labels: majority" in text


def test_too_few_labels_is_said_not_guessed() -> None:
    items = [result(n, 2, "C" if n == 0 else None) for n in range(10)]
    shares = estimate_shares(items, LabelMapping())
    assert shares.shares == [] and shares.unavailable == "1 labelled items: needs 2 or more"
    assert "n/a (1 labelled items: needs 2 or more)" in "\n".join(format_shares(shares))


def test_every_item_labelled_is_the_labels_alone() -> None:
    items = [result(n, 2, "CCP"[n % 3]) for n in range(9)]
    (_, _, c_share) = estimate_shares(items, LabelMapping()).shares
    assert c_share.estimate == pytest.approx(6 / 9) and c_share.tuning == 0.0


def test_share_difference_pairs_questions_labelled_in_both_runs() -> None:
    a = [result(n, 2, "C" if n < 6 else None) for n in range(10)]
    b = [result(n, 2 if n % 2 else 0, ("C" if n % 2 else "I") if n < 4 else None) for n in range(10)]
    difference = estimate_share_difference(a, b, LabelMapping())
    assert (difference.of, difference.n_items, difference.n_labelled) == ("difference", 10, 4)
    c_change = difference.shares[2]
    assert c_change.classical == pytest.approx(-0.5)  # of the four labelled in both, two went from C to I
    assert c_change.judge_only == pytest.approx(-0.5)
    assert c_change.ci95 is not None and -1.0 <= c_change.ci95.low <= c_change.ci95.high <= 1.0
