"""What a user sends to be graded: one (question, context, answer) triple."""

from __future__ import annotations

import hashlib
import json
import unicodedata
import uuid
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, field_validator


def new_item_id() -> str:
    return uuid.uuid4().hex[:16]


class Segment(BaseModel):
    """One retrieved context segment, as the seeds' reports list them (E5 hits over lecture transcripts)."""

    model_config = ConfigDict(extra="allow")

    text: str
    source: str | None = Field(default=None, description="Corpus id or document name.")
    start: str | None = Field(
        default=None, description="Start offset: a time such as 00:18:08, or a character offset (a number)."
    )
    end: str | None = Field(
        default=None, description="End offset: a time such as 00:20:12, or a character offset (a number)."
    )
    # Strict: `true` is not a score of 1.0 (no silent coercions at intake).
    score: Annotated[float, Strict()] | None = Field(default=None, description="Retriever score.")

    @field_validator("start", "end", mode="before")
    @classmethod
    def _offset_as_text(cls, value: object) -> object:
        # Character offsets arrive as numbers; kept as their text so times and offsets share one field type.
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        return value


def _not_a_bool(value: object) -> object:
    # pydantic would read true as 1 (bool is an int): a label is a class name or a number, never a switch.
    if isinstance(value, bool):
        raise ValueError("a label is a class name or a number, not true/false")
    return value


Label = Annotated[str | int | float, BeforeValidator(_not_a_bool)]

# Bumped if what makes two triples the same ever changes: keys of another version never match.
CONTENT_KEY_VERSION = "t1"


def _canonical(text: str) -> str:
    return unicodedata.normalize("NFC", text).strip()


def content_key(question: str, answer: str, context: str | list[Segment] | None) -> str:
    """The triple's identity: what a label is about, whatever id a submission gave the item.

    Two triples are the same when their question, answer and context texts are (after Unicode NFC and trimming each
    text's ends): a string context is one segment; no context, "" and [] are the same; a segment's source, offsets
    and retriever score are not part of it (the label judges the text), nor are blank segments.
    Returns "t1:" + the sha256 hex of the canonical JSON."""
    segments = [s.text for s in context] if isinstance(context, list) else [context or ""]
    texts = [_canonical(segment) for segment in segments]
    payload = [_canonical(question), _canonical(answer), [t for t in texts if t]]
    digest = hashlib.sha256(json.dumps(payload, ensure_ascii=False).encode()).hexdigest()
    return f"{CONTENT_KEY_VERSION}:{digest}"


class Triple(BaseModel):
    """A graded unit. Unknown extra fields are kept and passed through to the judgement."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(default_factory=new_item_id, min_length=1, max_length=256)
    question: str = Field(min_length=1, json_schema_extra={"pattern": r"\S"})  # not blank, as _question_not_blank
    answer: str
    context: str | list[Segment] | None = None
    manual_label: Label | None = None

    @field_validator("question")
    @classmethod
    def _question_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("question is blank")
        return value

    @field_validator("id", mode="before")
    @classmethod
    def _id_as_text(cls, value: object) -> object:
        # CSV and hand-written JSON often carry numeric ids.
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return value

    def text_lengths(self) -> dict[str, int]:
        """Characters per field, checked against the service's configurable intake limits: `context` counts every
        segment's text, `extra` the JSON of the passed-through fields."""
        if isinstance(self.context, list):
            context = sum(len(segment.text) for segment in self.context)
        else:
            context = len(self.context or "")
        extra = len(json.dumps(self.model_extra, ensure_ascii=False, default=str)) if self.model_extra else 0
        return {"question": len(self.question), "answer": len(self.answer), "context": context, "extra": extra}

    def content_key(self) -> str:
        """The triple's identity (`content_key`): what labels attach to across runs."""
        return content_key(self.question, self.answer, self.context)

    def passthrough(self) -> dict[str, object]:
        """The extra fields the user sent, to be copied onto the judgement."""
        return dict(self.model_extra or {})
