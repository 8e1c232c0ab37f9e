"""How manual labels and judge scores meet on one ordinal scale."""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator


class LabelClass(BaseModel):
    """One ordinal class: the label names that mean it and the 0–3 judge scores that fall in it."""

    name: str = Field(min_length=1)
    aliases: list[str] = Field(default_factory=list, description="Other spellings of this label (case-insensitive).")
    scores: list[int] = Field(min_length=1, description="Judge scores (0–3) that map to this class.")


class LabelMapping(BaseModel):
    """Ordered classes, worst first. The default: I ↔ 0, P/PC ↔ 1–2, C ↔ 3."""

    classes: list[LabelClass] = Field(
        default_factory=lambda: [
            LabelClass(name="I", aliases=["incorrect", "irrelevant", "N"], scores=[0]),
            LabelClass(name="P", aliases=["PC", "partial", "partially correct"], scores=[1, 2]),
            LabelClass(name="C", aliases=["correct", "relevant"], scores=[3]),
        ],
        min_length=2,
    )
    numeric_scale: str = Field(
        default="auto",
        pattern="^(auto|0-3|0-1)$",
        description="Numeric labels: on the 0–3 judge scale, 0–1 normalised, or auto (0–1 when any is fractional).",
    )

    @model_validator(mode="after")
    def _scores_cover_scale_once(self) -> LabelMapping:
        seen = sorted(s for c in self.classes for s in c.scores)
        if seen != [0, 1, 2, 3]:
            raise ValueError("classes must cover the scores 0, 1, 2, 3 exactly once between them")
        return self
