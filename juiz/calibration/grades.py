"""A calibration applied to a judgement: its `calibrated` grade and `provenance.calibration` (juiz.judging.judgements
applies the batch's calibration to every result)."""

from __future__ import annotations

import numpy as np

from juiz.calibration.features import feature_vector
from juiz.calibration.model import Calibration
from schemas.calibration import CalibratedGrade, CalibrationRef, CalibrationSpec
from schemas.judgement import Judgement

# Parsed calibrations by sha256: a worker applies the same one to every chunk of a batch.
_PARSED: dict[str, Calibration] = {}


def _parsed(spec: CalibrationSpec) -> Calibration:
    calibration = _PARSED.get(spec.sha256)
    if calibration is None or calibration.id != spec.id:
        if len(_PARSED) > 64:
            _PARSED.clear()
        calibration = _PARSED[spec.sha256] = Calibration.from_spec(spec)
    return calibration


def apply_calibration(judgement: Judgement, spec: CalibrationSpec | None) -> None:
    """Set (or, without a calibration, clear) the result's `calibrated` grade and `provenance.calibration`.

    A result missing one of the calibration's features gets `calibrated.error` naming it and no label."""
    if spec is None:
        judgement.calibrated = None
        judgement.provenance = judgement.provenance.model_copy(update={"calibration": None})
        return
    calibration = _parsed(spec)
    judgement.provenance = judgement.provenance.model_copy(
        update={"calibration": CalibrationRef(id=calibration.id, sha256=calibration.sha256)}
    )
    vector, missing = feature_vector(judgement, calibration.features)
    if vector is None:
        judgement.calibrated = CalibratedGrade(error=f"not calibrated: {missing}")
        return
    probabilities = calibration.predict_proba(np.asarray([vector]))[0]
    judgement.calibrated = CalibratedGrade(
        label=calibration.classes[int(probabilities.argmax())],
        probabilities={name: round(float(p), 6) for name, p in zip(calibration.classes, probabilities, strict=True)},
    )
