"""Batch-level types shared by the API and the workers."""

from __future__ import annotations

import unicodedata
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from schemas.calibration import CalibrationSpec
from schemas.judgement import MetricName
from schemas.labels import LabelMapping
from schemas.triple import Triple
from schemas.verifier import VerifierSpec

MAX_NAME_CHARS = 200
# Characters a name shown on one line of a page or a terminal must not hold: controls (tabs, newlines, escapes),
# line and paragraph separators, lone surrogates, and the bidirectional overrides that make text read backwards.
_UNPRINTABLE_CATEGORIES = frozenset({"Cc", "Cs", "Zl", "Zp"})
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _printable_name(value: str) -> str:
    for char in value:
        if unicodedata.category(char) in _UNPRINTABLE_CATEGORIES or char in _BIDI_CONTROLS:
            raise ValueError(f"a name holds no control characters (found U+{ord(char):04X})")
    return value


# A batch's name: one line of printable text, surrounding spaces dropped, at most MAX_NAME_CHARS; "" is no name.
BatchName = Annotated[
    str, StringConstraints(strip_whitespace=True, max_length=MAX_NAME_CHARS), AfterValidator(_printable_name)
]


def _default_metrics() -> list[MetricName]:
    return ["answer_relevance"]


# The judge's cost is its prompt tokens: ~1,500 of context is a retriever's top three or four segments.
DEFAULT_CONTEXT_CHARS = 6000


class BatchOptions(BaseModel):
    """How a batch is graded. Every field has a default, so `{}` is a valid options object."""

    # A misspelt option ({"mdoe": "fast"}) is a 422 naming it, not a batch silently graded with the default.
    model_config = ConfigDict(extra="forbid")

    metric: Literal["answer_relevance"] = Field(
        default="answer_relevance", description="Kept for older clients; `metrics` chooses what is graded."
    )
    metrics: list[MetricName] = Field(
        default_factory=_default_metrics,
        min_length=1,
        description="Metrics to grade, e.g. [answer_relevance, groundedness, context_relevance]; all go to the "
        "engine together. groundedness and context_relevance are `skipped` on items without a context.",
    )
    prompt: str | list[str] | None = Field(
        default=None,
        description="Prompt id, e.g. answer_relevance@juiz-2, or a list with at most one id per metric; metrics "
        "without one use their default version.",
    )
    lang: Literal["auto", "en", "pt"] = Field(default="auto", description="Prompt language; auto picks per question.")
    mode: Literal["cot", "fast"] = Field(
        default="cot",
        description="cot: the judge writes Criteria / Supporting Evidence / Score; fast: one forward pass, score only.",
    )
    label_mapping: LabelMapping = Field(default_factory=LabelMapping)
    samples: int = Field(
        default=1,
        ge=1,
        le=8,
        description="CoT replies drawn per item and metric in the same engine call (n > 1: each result gets the mean "
        "and majority score and their spread; the score is the majority's). Context relevance draws one.",
    )
    temperature: float | None = Field(
        default=None, ge=0, le=2, description="Sampling temperature; default 0 for one sample, 0.7 for several."
    )
    context_chars: int | None = Field(
        default=DEFAULT_CONTEXT_CHARS,
        ge=200,
        le=1_000_000,
        description="The most characters of an item's context the judge is shown (~4 characters a token). A longer "
        "context is cut to the segments the question is most about, kept with their numbers (a sentence's support is "
        "still checked against the segments it is about, from every segment); null shows every segment.",
    )
    calibration: CalibrationSpec | None = Field(
        default=None,
        description="A calibration from `juiz calibrate` (the JSON object): each result gets calibrated class "
        "probabilities and label, and provenance.calibration {id, sha256}.",
    )
    verifier: VerifierSpec | None = Field(
        default=None,
        description="A claim verifier from `juiz train --probe` (the JSON object), for groundedness: each sentence of "
        "an answer is read beside its context by the judge model, and an answer whose least supported sentence is "
        "below the verifier's cut gets groundedness 1 at most (metrics.groundedness.verifier says so). Needs "
        "groundedness in metrics and a worker whose judge is the verifier's model. Not the default.",
    )

    @field_validator("metrics")
    @classmethod
    def _metrics_once(cls, value: list[MetricName]) -> list[MetricName]:
        if len(set(value)) != len(value):
            raise ValueError("each metric may be named once")
        return value

    @model_validator(mode="after")
    def _sampling_and_calibration(self) -> BatchOptions:
        if self.samples > 1 and self.mode != "cot":
            raise ValueError("samples > 1 needs mode cot (fast mode's expected score already is the distribution)")
        if self.samples > 1 and self.temperature == 0:
            raise ValueError("samples > 1 needs a temperature above 0 (at 0 every sample is the same)")
        if self.calibration is not None:
            missing = [m for m in self.calibration.metrics() if m not in self.metrics]
            if missing:
                raise ValueError(f"calibration reads {', '.join(missing)}: add it to metrics")
        if self.verifier is not None and "groundedness" not in self.metrics:
            raise ValueError("verifier reads groundedness: add it to metrics")
        return self

    @property
    def sampling_temperature(self) -> float:
        """The temperature used: the requested one, else 0 for one sample and 0.7 for several."""
        if self.temperature is not None:
            return self.temperature
        return 0.7 if self.samples > 1 else 0.0

    def prompt_ids(self) -> list[str]:
        """The requested prompt ids as a list (`prompt` may be one id or several)."""
        if self.prompt is None:
            return []
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)

    @property
    def primary_metric(self) -> MetricName:
        """The metric whose grade fills a result's top-level fields: answer_relevance when requested (today's
        fields stay where they are), else the first metric requested."""
        return "answer_relevance" if "answer_relevance" in self.metrics else self.metrics[0]


class BatchSubmission(BaseModel):
    """POST /v1/batches as JSON. Other top-level fields are refused (422), as the API's intake does."""

    model_config = ConfigDict(extra="forbid")

    items: list[Triple] = Field(min_length=1)
    options: BatchOptions = Field(default_factory=BatchOptions)
    name: BatchName | None = Field(
        default=None,
        description='The batch\'s name, shown on the web page and in its view, e.g. "lectures, prompt juiz-2" (at most '
        "200 characters, no control characters; PATCH /v1/batches/{id} renames it).",
    )
    field_map: str | dict[str, str] | None = Field(
        default=None, description="Your field names → juiz's: a preset (ragas, common) or {their_name: juiz_name}."
    )


class BatchStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class BatchCounts(BaseModel):
    total: int
    done: int = 0
    ok: int = 0
    parse_error: int = 0
    failed: int = 0
