"""The contract between juiz's API, its workers and its command line.

Everything that crosses a process boundary (a JSON body, an RQ job argument, a JSONL result line) is one of these
pydantic models. This package imports nothing from `juiz`, `service` or `workers`.
"""

from schemas.agreement import AgreementByMetric, AgreementReport, Interval, Statistic
from schemas.api import (
    BatchLinks,
    BatchRename,
    BatchView,
    ErrorBody,
    GradeRequest,
    HealthView,
    ProgressEvent,
    ReadyView,
    ResultsPage,
    WorkerView,
)
from schemas.batch import MAX_NAME_CHARS, BatchCounts, BatchName, BatchOptions, BatchStatus, BatchSubmission
from schemas.calibration import CalibrationSpec
from schemas.judgement import Judgement, JudgementStatus, Provenance
from schemas.labels import LabelClass, LabelMapping
from schemas.triple import Segment, Triple
from schemas.verifier import VerifierSpec

__all__ = [
    "MAX_NAME_CHARS",
    "AgreementByMetric",
    "AgreementReport",
    "BatchCounts",
    "BatchLinks",
    "BatchName",
    "BatchOptions",
    "BatchRename",
    "BatchStatus",
    "BatchSubmission",
    "BatchView",
    "CalibrationSpec",
    "ErrorBody",
    "GradeRequest",
    "HealthView",
    "Interval",
    "Judgement",
    "JudgementStatus",
    "LabelClass",
    "LabelMapping",
    "ProgressEvent",
    "Provenance",
    "ReadyView",
    "ResultsPage",
    "Segment",
    "Statistic",
    "Triple",
    "VerifierSpec",
    "WorkerView",
]
