"""What juiz returns for one triple: the same fields from the CLI's JSONL and the API."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.annotation import Annotation
from schemas.calibration import CalibratedGrade, CalibrationRef
from schemas.triple import Label, Segment, content_key
from schemas.uncertainty import SampleSummary, Uncertainty
from schemas.verifier import VerifierReading, VerifierRef


class JudgementStatus(StrEnum):
    OK = "ok"
    PARSE_ERROR = "parse_error"  # the judge replied, but not in the template; raw_output keeps what it said
    FAILED = "failed"  # no usable reply (engine error, input too long, cancelled); `error` says why


# The metrics juiz grades (the RAG triad, and completeness beside answer relevance). answer_relevance reads question +
# answer (does it address the question?); completeness, how much of what the context says a complete answer states;
# groundedness reads the context + question + answer; context_relevance reads question + each context segment.
MetricName = Literal["answer_relevance", "groundedness", "context_relevance", "completeness"]
METRICS: tuple[MetricName, ...] = ("answer_relevance", "groundedness", "context_relevance", "completeness")
# completeness reads the judge's own answer from the context: without a context there is nothing to be complete against.
NEEDS_CONTEXT: frozenset[str] = frozenset({"groundedness", "context_relevance", "completeness"})


class MetricStatus(StrEnum):
    OK = "ok"
    PARSE_ERROR = "parse_error"
    FAILED = "failed"
    SKIPPED = "skipped"  # the metric does not apply to this item (e.g. groundedness without a context); see `error`


class Provenance(BaseModel):
    """Which judge made this result, so results from different prompts or models are never mixed up."""

    model: str
    prompt: str = Field(description="metric@version.lang, e.g. answer_relevance@juiz-1.pt")
    prompt_sha256: str
    sampling: dict[str, Any]
    juiz_version: str
    engine: str | None = Field(
        default=None,
        description="Judge back end when not vLLM in process: openai (an OpenAI-compatible server) or llamacpp "
        "(llama.cpp in process, on the model's GGUF).",
    )
    engine_host: str | None = Field(default=None, description="Host of the judge server's base URL (never the key).")
    engine_dtype: str | None = Field(
        default=None,
        description="The dtype the in-process engine ran the model in, e.g. bfloat16: the same prompt run in float32 "
        "and in bf16 can differ in the second decimal of a check's P(yes).",
    )
    engine_quantisation: str | None = Field(
        default=None,
        description="The quantisation of the weights llama.cpp ran, e.g. Q4_K_M: a quantised model's P(yes) differs "
        "from the same model's in float32.",
    )
    calibration: CalibrationRef | None = Field(
        default=None, description="The calibration that made `calibrated` (options.calibration), by id and sha256."
    )
    verifier: VerifierRef | None = Field(
        default=None, description="Groundedness with options.verifier: the probe that read the answer's sentences."
    )


class Grade(BaseModel):
    """The grade fields every graded unit shares: a metric of an item, or one segment of its context."""

    status: MetricStatus
    score: int | None = Field(default=None, ge=0, le=3)
    normalized_score: float | None = Field(default=None, ge=0, le=1)
    expected_score: float | None = Field(default=None, ge=0, le=1)
    criteria: str | None = None
    supporting_evidence: str | None = None
    raw_output: str | None = None
    error: str | None = None


class SegmentGrade(Grade):
    """Context relevance of one retrieved segment for the question."""

    index: int = Field(ge=0, description="Position of the segment in the item's context (0-based).")


class CheckStatus(StrEnum):
    OK = "ok"
    LOW_MASS = (
        "low_mass"  # the judge's first token was neither yes nor no (mass below the floor): not read, not guessed
    )
    FAILED = "failed"  # no reply (engine error, too long, cancelled); `error` says why


class CheckResult(BaseModel):
    """One yes/no check of a check-based prompt (e.g. answer_relevance@checks-1), read from token probabilities.

    `p_yes` is P(yes) / (P(yes) + P(no)) at the reply's first token, over the single-token spellings of yes and no in
    English and Portuguese; `mass` is P(yes) + P(no), how much of the judge's probability the two answers held. Most
    checks are asked so that yes means good; `yes_means` "bad" marks one asked the other way round, whose `value` (how
    good the answer is by this check) is then 1 − p_yes. A check the prompt counts from the item's text instead of
    asking (e.g. whether the answer says more than the question's words) has p_yes 1 or 0 and mass 1."""

    name: str = Field(description="The check's name in its prompt file, e.g. attempts_answer.")
    question: str = Field(description="The question asked, as the prompt file words it (before filling in).")
    role: Literal["veto", "core", "scale", "info"] = Field(
        description="veto: can sink the answer alone; core: makes the score; scale: multiplies it; info: recorded only."
    )
    p_yes: float | None = Field(default=None, ge=0, le=1)
    mass: float | None = Field(default=None, ge=0, le=1)
    yes_means: Literal["good", "bad"] = Field(default="good", description="What a yes says of the answer.")
    status: CheckStatus
    target: str | None = Field(
        default=None, description="What this check was about: one sentence of the answer, or the judge's reference."
    )
    error: str | None = None
    words: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="For a per-point check whose prompt reads the answer's wording too (`words_weight`): the share of "
        "the point's words the answer uses, counted, not asked; null for a point with no word to count (the judge's "
        "reading stands alone).",
    )

    @property
    def value(self) -> float | None:
        """How good the answer is by this check (0–1): P(yes), or P(no) for a check where yes means bad."""
        if self.p_yes is None:
            return None
        return self.p_yes if self.yes_means == "good" else 1.0 - self.p_yes


class MetricResult(Grade):
    """One metric's grade of one item, with its own provenance. `skipped` and `failed` carry the reason in `error`
    and never a score."""

    latency_s: float | None = None
    provenance: Provenance | None = None
    segments: list[SegmentGrade] | None = Field(
        default=None, description="context_relevance only: each segment's grade, in context order."
    )
    aggregate: str | None = Field(
        default=None, description="context_relevance only: how `score` comes from the segments (max)."
    )
    mean_score: float | None = Field(
        default=None, ge=0, le=1, description="context_relevance only: mean normalised segment score (precision)."
    )
    samples: SampleSummary | None = Field(
        default=None, description="With options.samples > 1: the sampled replies' scores and their spread."
    )
    checks: list[CheckResult] | None = Field(
        default=None,
        description="Check-based prompts only: every yes/no check asked, with its probability (per sentence where the "
        "check is asked per sentence).",
    )
    reference: str | None = Field(
        default=None, description="Check-based groundedness: the short answer the judge wrote itself from the context."
    )
    strength: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Check-based prompts only: the rule's strength (the checks combined, 0–1), which the cuts are "
        "read against.",
    )
    verifier: VerifierReading | None = Field(
        default=None,
        description="Groundedness with options.verifier: P(supported) of each sentence, and whether it capped the "
        "grade.",
    )


class Judgement(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    status: JudgementStatus
    score: int | None = Field(default=None, ge=0, le=3)
    normalized_score: float | None = Field(default=None, ge=0, le=1)
    expected_score: float | None = Field(
        default=None, ge=0, le=1, description="Σ p(k)·k / 3 over the score digit's probabilities."
    )
    criteria: str | None = None
    supporting_evidence: str | None = None
    raw_output: str | None = None
    manual_label: Label | None = None
    annotations: list[Annotation] | None = Field(
        default=None,
        description="Every annotator's label on this triple (one per annotator and metric). When present, the label "
        "the judge is compared with comes from them by a consensus rule, not from manual_label.",
    )
    automated_label: str | None = None
    label_source: str | None = Field(
        default=None,
        description="What gives automated_label and the top-level grade: 'verdict' (the label mapping's rule, or "
        "juiz's default rule when the item was graded for every metric it names; each metric's own grade stays "
        "under `metrics`), or the name of the one metric read.",
    )
    latency_s: float | None = None
    provenance: Provenance
    error: str | None = None
    question: str
    answer: str
    context: str | list[Segment] | None = None
    metrics: dict[str, MetricResult] | None = Field(
        default=None,
        description="Every requested metric by name. The top-level score fields hold the verdict when the label "
        "mapping's rule applies (label_source 'verdict'), else they repeat answer_relevance when it was requested, "
        "otherwise the first requested metric (provenance.prompt names which).",
    )
    samples: SampleSummary | None = Field(
        default=None, description="With options.samples > 1: the main metric's sampled scores and their spread."
    )
    calibrated: CalibratedGrade | None = Field(
        default=None, description="With options.calibration: calibrated class probabilities and label."
    )
    uncertain: bool | None = Field(
        default=None, description="Worth a human look: samples disagree, calibrated label unsure, or near a cut point."
    )
    uncertainty: Uncertainty | None = None
    cached: bool = Field(
        default=False,
        description="Reused from the result cache: an identical item graded before for the same tenant (or, with "
        "JUIZ_SHARED_RESULT_CACHE, any tenant) with the same prompts, options and model.",
    )

    def content_key(self) -> str:
        """The graded triple's identity (`schemas.triple.content_key`): what labels attach to across runs."""
        return content_key(self.question, self.answer, self.context)
