"""How well a set of class probabilities matches the labels: Brier score, expected calibration error (ECE) and the
reliability table it is computed from."""

from __future__ import annotations

import numpy as np

from schemas.calibration import CalibrationFigures, ReliabilityBin

RELIABILITY_BINS = 10


def brier_score(probabilities: np.ndarray, labels: np.ndarray) -> float:
    """Multi-class Brier score: mean over items of Σ_k (p_k − [y = k])². 0 is perfect; 2 is the worst."""
    onehot = np.eye(probabilities.shape[1])[labels]
    return float(np.mean(np.sum((probabilities - onehot) ** 2, axis=1)))


def reliability_table(
    probabilities: np.ndarray, labels: np.ndarray, bins: int = RELIABILITY_BINS
) -> list[dict[str, float | int]]:
    """Top-class confidence in equal-width bins: per non-empty bin, its range, size, mean confidence, accuracy."""
    confidence = probabilities.max(axis=1)
    correct = (probabilities.argmax(axis=1) == labels).astype(float)
    edges = np.linspace(0.0, 1.0, bins + 1)
    # Bin i holds (edges[i], edges[i+1]]; the first bin also holds exactly 0.
    which = np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, bins - 1)
    rows: list[dict[str, float | int]] = []
    for i in range(bins):
        members = which == i
        if not members.any():
            continue
        rows.append(
            {
                "low": round(float(edges[i]), 4),
                "high": round(float(edges[i + 1]), 4),
                "n": int(members.sum()),
                "confidence": round(float(confidence[members].mean()), 6),
                "accuracy": round(float(correct[members].mean()), 6),
            }
        )
    return rows


def expected_calibration_error(probabilities: np.ndarray, labels: np.ndarray, bins: int = RELIABILITY_BINS) -> float:
    """ECE: Σ over bins of (bin size / n) · |accuracy − mean confidence|, on the top class."""
    rows = reliability_table(probabilities, labels, bins)
    n = len(labels)
    return float(sum(int(r["n"]) / n * abs(float(r["accuracy"]) - float(r["confidence"])) for r in rows))


def figures(probabilities: np.ndarray, labels: np.ndarray) -> CalibrationFigures:
    return CalibrationFigures(
        brier=round(brier_score(probabilities, labels), 6),
        ece=round(expected_calibration_error(probabilities, labels), 6),
        reliability=[ReliabilityBin.model_validate(row) for row in reliability_table(probabilities, labels)],
    )
