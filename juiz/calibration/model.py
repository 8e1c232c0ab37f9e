"""The fitted calibration: a linear model on the raw features, its file (`CalibrationSpec`) and its predictions.

numpy only: applying a calibration needs no scikit-learn."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from schemas.calibration import CalibrationSpec, calibration_sha256


@dataclass
class Calibration:
    """A fitted calibration: features → class probabilities; serialisable, identified by id and content hash."""

    classes: list[str]
    features: list[str]
    coef: list[list[float]]
    intercept: list[float]
    fitted_classes: list[int]  # class indices the final model saw (all, unless a class had no labels)
    cross_fitted: dict[str, Any] = field(default_factory=dict)  # held-out figures the calibration was judged by
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    created_at: float = field(default_factory=time.time)

    @property
    def sha256(self) -> str:
        """Hash of what decides a prediction (classes, features, coefficients): two files that predict alike match."""
        return calibration_sha256(self.classes, self.features, self.coef, self.intercept, self.fitted_classes)

    def predict_proba(self, features: np.ndarray) -> np.ndarray:
        logits = np.asarray(features, dtype=float) @ np.asarray(self.coef).T + np.asarray(self.intercept)
        if logits.shape[1] == 1:  # scikit-learn's binary case: one logit for the second class
            logits = np.hstack([np.zeros_like(logits), logits])
        logits -= logits.max(axis=1, keepdims=True)
        fitted = np.exp(logits)
        fitted /= fitted.sum(axis=1, keepdims=True)
        out = np.zeros((len(fitted), len(self.classes)))
        out[:, self.fitted_classes] = fitted
        return out

    def predict(self, features: np.ndarray) -> list[str]:
        return [self.classes[i] for i in self.predict_proba(features).argmax(axis=1)]

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "sha256": self.sha256,
            "created_at": self.created_at,
            "classes": self.classes,
            "features": self.features,
            "model": {
                "kind": "multinomial logistic regression (scikit-learn)",
                "coef": self.coef,
                "intercept": self.intercept,
                "fitted_classes": self.fitted_classes,
            },
            "cross_fitted": self.cross_fitted,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Calibration:
        model = data["model"]
        calibration = cls(
            classes=list(data["classes"]),
            features=list(data["features"]),
            coef=model["coef"],
            intercept=model["intercept"],
            fitted_classes=model["fitted_classes"],
            cross_fitted=data.get("cross_fitted", {}),
            id=data["id"],
            created_at=data["created_at"],
        )
        if data.get("sha256") and data["sha256"] != calibration.sha256:
            raise ValueError("calibration file was altered: its sha256 does not match its content")
        return calibration

    @classmethod
    def from_spec(cls, spec: CalibrationSpec) -> Calibration:
        """From `options.calibration` (already validated, hash included)."""
        return cls.from_json(spec.model_dump())

    def spec(self) -> CalibrationSpec:
        return CalibrationSpec.model_validate(self.to_json())
