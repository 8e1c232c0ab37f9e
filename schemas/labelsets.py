"""Named labelled sets: triples a team labelled, kept under a name so every later run can grade them again.

A set holds its triples; their labels are the tenant's labels of those triples (`schemas.annotation`, kept per
triple's content key), so a label set anywhere, on any run of the triple, is the set's label too. A set is exported
and imported as JSONL, one `LabelledItem` per line: the triple and every annotator's label on it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from schemas.annotation import Annotation, AnnotationRecord
from schemas.batch import BatchName, BatchOptions
from schemas.triple import Triple

LABELLED_SET_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
MAX_DESCRIPTION_CHARS = 2000
MAX_RUBRIC_CHARS = 4000
MAX_SET_ITEMS = 100_000
MAX_LABELS_IMPORT = 100_000

LabelledSetName = Annotated[
    str,
    StringConstraints(pattern=LABELLED_SET_NAME_PATTERN),
    Field(description="Letters, digits, '.', '_' and '-', at most 100, starting with a letter or digit."),
]


class LabelledItem(Triple):
    """One line of a labelled set's JSONL: the triple (its own extra fields kept) and the labels the team gave it."""

    triple: str | None = Field(
        default=None,
        description="The triple's content key (`schemas.triple.content_key`); on import it must match the triple's "
        "question, answer and context when given.",
    )
    annotations: list[Annotation] = Field(default_factory=list, description="Every annotator's label on the triple.")

    def item(self) -> Triple:
        """The triple alone, as a run grades it."""
        return Triple.model_validate(self.model_dump(exclude={"triple", "annotations"}, exclude_none=True))


class LabelledSetCreate(BaseModel):
    """POST /v1/labelsets: a new named set, of a batch's graded items, of the items given, or both."""

    model_config = ConfigDict(extra="forbid")

    name: LabelledSetName
    description: Annotated[str, StringConstraints(strip_whitespace=True, max_length=MAX_DESCRIPTION_CHARS)] = ""
    rubric: Annotated[str, StringConstraints(strip_whitespace=True, max_length=MAX_RUBRIC_CHARS)] = Field(
        default="", description="What the classes mean (C, P, I): shown in the label queue of every run of the set."
    )
    batch: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{32}$", description="Take the triples of this batch's graded items."
    )
    labelled_only: bool = Field(
        default=True, description="With `batch`: only the items somebody labelled (or whose upload gave a label)."
    )
    items: list[LabelledItem] = Field(default_factory=list, max_length=MAX_SET_ITEMS)


class LabelledSetUpdate(BaseModel):
    """PATCH /v1/labelsets/{name}: the set's description and/or rubric; a field left out stays as it is. The rubric
    shows in the label queue of the set's runs started after the change."""

    model_config = ConfigDict(extra="forbid")

    description: Annotated[str, StringConstraints(strip_whitespace=True, max_length=MAX_DESCRIPTION_CHARS)] | None = (
        None
    )
    rubric: Annotated[str, StringConstraints(strip_whitespace=True, max_length=MAX_RUBRIC_CHARS)] | None = None


class LabelledSetImport(BaseModel):
    """POST /v1/labelsets/{name}/items as JSON (a JSONL upload sends the same items one per line)."""

    model_config = ConfigDict(extra="forbid")

    items: list[LabelledItem] = Field(max_length=MAX_SET_ITEMS)


class LabelledSetImported(BaseModel):
    name: str
    added: int = Field(ge=0, description="Triples new to the set (a triple already in it is kept once).")
    labels: int = Field(ge=0, description="Labels stored (an annotator's earlier label on the same triple replaced).")
    items: int = Field(ge=0, description="Triples in the set now.")


class LabelledSetView(BaseModel):
    """A named labelled set, as the API lists it."""

    name: str
    description: str = ""
    rubric: str = ""
    created_at: datetime
    updated_at: datetime
    source_batch: str | None = Field(default=None, description="The batch its first triples came from, if any.")
    items: int = Field(ge=0, description="Triples in the set.")
    labelled: int = Field(ge=0, description="Triples with at least one annotator's label (or an upload's label).")
    annotators: list[str] = Field(default_factory=list, description="Who labelled the set's triples.")


class LabelledSetList(BaseModel):
    sets: list[LabelledSetView] = Field(description="The tenant's named sets, newest first.")


class LabelledSetRun(BaseModel):
    """POST /v1/labelsets/{name}/runs: grade the set's triples as a new batch; their labels come with them."""

    model_config = ConfigDict(extra="forbid")

    options: BatchOptions = Field(default_factory=BatchOptions)
    name: BatchName | None = Field(default=None, description="The batch's name; default: the set's name.")


class LabelsImport(BaseModel):
    """POST /v1/labels: lines of a labels file, each naming its triple by content key (`triple`)."""

    model_config = ConfigDict(extra="forbid")

    labels: list[AnnotationRecord] = Field(max_length=MAX_LABELS_IMPORT)


class LabelsImported(BaseModel):
    imported: int = Field(description="Labels stored (an annotator's earlier label on the same triple replaced).")
