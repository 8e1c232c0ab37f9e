"""A claim verifier as it crosses process boundaries: the probe `juiz train --probe` writes and `options.verifier`
takes, what a result graded with it records, and how the verifier read one answer."""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel, ConfigDict, Field, model_validator

PROBE_FORMAT = "juiz-probe/1"


def probe_version(model: str, layer: int | None, prompt_hash: str, weights: list[float], bias: float) -> str:
    """A probe's version: the hash of what decides its reading (the model and layer read, the check prompt, the head).

    The one definition: juiz.judging.probe names its artefacts with it too, so a file `juiz train --probe` wrote
    validates here."""
    blob = json.dumps([model, layer, prompt_hash, weights, bias], sort_keys=True).encode()
    return "probe-" + hashlib.sha256(blob).hexdigest()[:12]


class VerifierSpec(BaseModel):
    """A probe (the file `juiz train --probe` writes): a logistic head over the judge model's hidden state at the end
    of a yes/no check "is this CLAIM stated by the CONTEXT?", trained on synthetic claims from a corpus (`juiz synth`).

    With it, each sentence of an answer is read beside the item's context; an answer whose least supported sentence's
    P(supported) is below `cut` has its groundedness capped at 1."""

    model_config = ConfigDict(extra="forbid")

    format: str = Field(default=PROBE_FORMAT, description=f"Always {PROBE_FORMAT}.")
    version: str = Field(description="probe-<12 hex>: the hash of the model, layer, check prompt and head.")
    model: str = Field(description="The judge model whose hidden states the head reads: it must be the worker's.")
    prompt_hash: str = Field(description="The check prompt the states were read with (juiz.judging.probe).")
    layer: int | None = Field(ge=0, description="The hidden layer read (0 = embeddings); null reads P(Yes) alone.")
    with_p_yes: bool = Field(description="Whether the head also reads the log-odds of P(Yes) at that token.")
    mean: list[float] = Field(min_length=1)
    scale: list[float] = Field(min_length=1)
    weights: list[float] = Field(min_length=1)
    bias: float
    cut: float = Field(
        gt=0,
        lt=1,
        description="An answer whose least supported sentence reads below this has groundedness at most 1.",
    )
    trained_on: dict[str, object] = Field(default_factory=dict, description="What the head was fitted on.")

    @model_validator(mode="after")
    def _consistent(self) -> VerifierSpec:
        if self.format != PROBE_FORMAT:
            raise ValueError(f"format must be {PROBE_FORMAT}")
        if not len(self.mean) == len(self.scale) == len(self.weights):
            raise ValueError("mean, scale and weights must have one value per feature")
        if self.layer is None and not self.with_p_yes:
            raise ValueError("a probe reads a layer, P(Yes), or both")
        expected = probe_version(self.model, self.layer, self.prompt_hash, self.weights, self.bias)
        if self.version != expected:
            raise ValueError("verifier was altered: its version does not match its content")
        return self


class VerifierRef(BaseModel):
    """Which verifier read a result's groundedness (like a prompt's id): its version and cut."""

    version: str
    cut: float


class VerifierReading(BaseModel):
    """How the verifier read one answer: P(supported) of each sentence, the least of them, and whether that capped
    the metric's grade."""

    sentences: list[float] = Field(min_length=1, description="P(supported) per sentence, in answer order.")
    p_supported: float = Field(ge=0, le=1, description="The least supported sentence's.")
    capped: bool = Field(description="The judge's grade was above 1 and p_supported below the cut: it became 1.")
