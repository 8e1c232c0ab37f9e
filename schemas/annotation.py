"""People's labels: one annotator's label on one triple, a labels file's line, and the rule that makes one reference
label of several annotators' labels (what the judge is compared against)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.labels import METRIC_NAMES
from schemas.triple import Label

MAX_ANNOTATOR_CHARS = 128
MAX_COMMENT_CHARS = 4000


def _known_metric(value: str | None) -> str | None:
    if value is not None and value not in METRIC_NAMES:
        raise ValueError(f"unknown metric {value!r}; known: {', '.join(METRIC_NAMES)}")
    return value


class Annotation(BaseModel):
    """One annotator's label on one triple. An annotator's later label on the same triple and metric replaces their
    earlier one; another annotator's label never does."""

    # A misspelt key ({"coment": ...}) is an error naming it: ignored, the comment would be lost without a word.
    model_config = ConfigDict(extra="forbid")

    annotator: str = Field(
        min_length=1, max_length=MAX_ANNOTATOR_CHARS, description="Who set the label (a key's or page user's name)."
    )
    label: Label = Field(description="A class name of the label mapping (C, P, I or an alias) or a number.")
    at: AwareDatetime | None = Field(
        default=None,
        description="When it was set (with a time zone). Of one annotator's labels on an item the latest counts; "
        "without times, the last one given.",
    )
    comment: str | None = Field(
        default=None, max_length=MAX_COMMENT_CHARS, description="Why, in the annotator's words."
    )
    metric: str | None = Field(
        default=None,
        description="The metric the label is about (answer_relevance, groundedness, context_relevance); null: the "
        "answer as a whole, which the judge's verdict or main metric is compared with.",
    )

    @field_validator("metric")
    @classmethod
    def _metric_known(cls, value: str | None) -> str | None:
        return _known_metric(value)


class AnnotationRecord(Annotation):
    """One line of a labels file (a labelled set): an annotation and the item it is about, by the item's `id`, by the
    triple's content key (`schemas.triple.content_key`), or both (the key wins where both are given)."""

    id: str | None = Field(default=None, min_length=1, description="The item's id in the results it labels.")
    triple: str | None = Field(default=None, min_length=1, description="The triple's content key, e.g. t1:9f2c….")

    @model_validator(mode="after")
    def _names_an_item(self) -> AnnotationRecord:
        if self.id is None and self.triple is None:
            raise ValueError("a label line needs the item's id or the triple's content key (triple)")
        return self

    def annotation(self) -> Annotation:
        """The label alone, without the item it names."""
        return Annotation.model_validate(self.model_dump(exclude={"id", "triple"}))


class ConsensusRule(BaseModel):
    """Which label the judge is compared against when several annotators labelled an item.

    majority: the class most of the item's annotators gave; a tie (as many for two classes, none ahead) gives the item
    no reference label: it is left out of the judge's agreement and counted as tied, never settled by a coin.
    annotator: one named annotator's label; items they did not label have no reference label."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["majority", "annotator"] = "majority"
    annotator: str | None = Field(default=None, min_length=1, max_length=MAX_ANNOTATOR_CHARS)
    metric: str | None = Field(
        default=None, description="Which annotations count: those about this metric; null: the answer as a whole."
    )

    @field_validator("metric")
    @classmethod
    def _metric_known(cls, value: str | None) -> str | None:
        return _known_metric(value)

    @model_validator(mode="after")
    def _annotator_named(self) -> ConsensusRule:
        if (self.kind == "annotator") != (self.annotator is not None):
            raise ValueError("the rule 'annotator' names one annotator, and only that rule does")
        return self

    @classmethod
    def parse(cls, text: str, metric: str | None = None) -> ConsensusRule:
        """`majority` or `annotator:NAME`, as the command line spells them. Raises ValueError for anything else."""
        kind, _, name = text.partition(":")
        if kind == "majority" and not name:
            return cls(kind="majority", metric=metric)
        if kind == "annotator" and name.strip():
            return cls(kind="annotator", annotator=name.strip(), metric=metric)
        raise ValueError(f"unknown consensus rule {text!r}: use majority or annotator:NAME")

    def describe(self) -> str:
        """The rule in words, as reports name it."""
        about = f" on {self.metric}" if self.metric else ""
        if self.kind == "annotator":
            return f"annotator {self.annotator}'s label{about}"
        return f"majority of the annotators' labels{about}; a tie leaves the item out"


class LabelChange(BaseModel):
    """PATCH /v1/batches/{id}/items/{item}: the caller's new label (a class name or alias of the batch's mapping, or a
    number); null clears it."""

    model_config = ConfigDict(extra="forbid")

    manual_label: Label | None = Field(description='e.g. "C", "P", "I", 2, 0.5; null removes the label')
    metric: str | None = Field(
        default=None,
        description="The metric the label is about (answer_relevance, groundedness, context_relevance); null: the "
        "answer as a whole (the item's manual_label).",
    )
    comment: str | None = Field(default=None, max_length=MAX_COMMENT_CHARS, description="Why, in your words.")

    @field_validator("metric")
    @classmethod
    def _metric_known(cls, value: str | None) -> str | None:
        return _known_metric(value)


class ItemLabelView(BaseModel):
    batch_id: str
    item_id: str
    index: int = Field(description="0-based position of the item in the batch as submitted")
    manual_label: Label | None = Field(
        description="the item's reference label: the consensus of its annotators' labels (one annotator: theirs)"
    )
    manual_label_by: str = Field(description="the annotator that set it (the key's name, or the tenant)")
    manual_label_at: datetime
    automated_label: str | None
