"""A calibration as it crosses process boundaries: the JSON `juiz calibrate` writes and `options.calibration` takes,
what a calibrated result records, and the held-out figures a calibration is judged by."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


def calibration_sha256(
    classes: list[str], features: list[str], coef: list[list[float]], intercept: list[float], fitted_classes: list[int]
) -> str:
    """Hash of what decides a prediction (classes, features, coefficients): two files that predict alike match.

    The one definition: juiz.calibration.model hashes with it too, so a file from `juiz calibrate` validates here."""
    payload = json.dumps([classes, features, coef, intercept, fitted_classes])
    return hashlib.sha256(payload.encode()).hexdigest()


class ReliabilityBin(BaseModel):
    """One bin of a reliability table: items whose top-class probability is in (low, high]."""

    low: float
    high: float
    n: int = Field(ge=0)
    confidence: float = Field(description="Mean top-class probability of the bin's items.")
    accuracy: float = Field(description="Share of the bin's items whose top class is the manual label.")


class CalibrationModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str = "multinomial logistic regression (scikit-learn)"
    coef: list[list[float]] = Field(min_length=1)
    intercept: list[float] = Field(min_length=1)
    fitted_classes: list[int] = Field(min_length=2, description="Class indices the model was fit on, ascending.")


class CalibrationSpec(BaseModel):
    """A fitted calibration (the file `juiz calibrate` writes): the judge's signals → class probabilities.

    `features` names the signals in the order the coefficients expect them, e.g. `answer_relevance.expected_score`.
    A file whose content no longer matches its sha256 is refused.
    """

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=64)
    sha256: str = Field(pattern="^[0-9a-f]{64}$")
    created_at: float
    classes: list[str] = Field(min_length=2, description="Class names, worst first.")
    features: list[str] = Field(min_length=1)
    model: CalibrationModel
    cross_fitted: dict[str, Any] = Field(
        default_factory=dict, description="Held-out (cross-fitted) figures on the labelled items it was fit on."
    )

    @model_validator(mode="after")
    def _consistent(self) -> CalibrationSpec:
        m = self.model
        rows = 1 if len(m.fitted_classes) == 2 else len(m.fitted_classes)
        if len(m.coef) != rows or len(m.intercept) != rows:
            raise ValueError(f"model needs {rows} coefficient row(s) for {len(m.fitted_classes)} fitted classes")
        if any(len(row) != len(self.features) for row in m.coef):
            raise ValueError(f"each coefficient row needs one value per feature ({len(self.features)})")
        if sorted(set(m.fitted_classes)) != m.fitted_classes or not all(
            0 <= c < len(self.classes) for c in m.fitted_classes
        ):
            raise ValueError("fitted_classes must be ascending class indices")
        expected = calibration_sha256(self.classes, self.features, m.coef, m.intercept, m.fitted_classes)
        if expected != self.sha256:
            raise ValueError("calibration was altered: its sha256 does not match its content")
        return self

    def metrics(self) -> list[str]:
        """The metrics whose grades the features read (`answer_relevance.expected_score` → answer_relevance)."""
        return list(dict.fromkeys(f.split(".", 1)[0] for f in self.features))


class CalibrationRef(BaseModel):
    """Which calibration made a calibrated result (like a prompt's id and sha256)."""

    id: str
    sha256: str


class CalibratedGrade(BaseModel):
    """A result's grade through a calibration: class probabilities and the most probable class. When the result
    lacks one of the calibration's features, `label` and `probabilities` are null and `error` says which."""

    label: str | None = None
    probabilities: dict[str, float] | None = None
    error: str | None = None


class CalibrationFigures(BaseModel):
    """Held-out probability quality: Brier score (0 best, 2 worst), expected calibration error and its table."""

    brier: float
    ece: float
    reliability: list[ReliabilityBin]
