"""How manual labels and judge scores meet on one ordinal scale."""

from __future__ import annotations

from itertools import pairwise
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Metric names as schemas.judgement spells them (not imported: judgement imports this module's neighbours).
METRIC_NAMES = ("answer_relevance", "groundedness", "context_relevance", "completeness")


class LabelClass(BaseModel):
    """One ordinal class: the label names that mean it and the 0–3 judge scores that fall in it."""

    # A misspelt key ({"metrc": ...}) is a 422 / exit 2 naming it: ignored, it would quietly change agreement.
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    aliases: list[str] = Field(default_factory=list, description="Other spellings of this label (case-insensitive).")
    scores: list[int] = Field(min_length=1, description="Judge scores (0–3) that map to this class.")


class VerdictLevel(BaseModel):
    """One class of a verdict rule: the label given when every named metric reaches its minimum."""

    # A misspelt key ({"metrc": ...}) is a 422 / exit 2 naming it: ignored, it would quietly change agreement.
    model_config = ConfigDict(extra="forbid")

    label: str = Field(min_length=1, description="A class name of the mapping, e.g. C.")
    when: dict[str, float] = Field(
        min_length=1,
        description="metric → minimum on the 0–3 scale (the discrete score, or 3 × the expected score when "
        "signal is expected_score), e.g. {answer_relevance: 3, groundedness: 3}.",
    )


class LabelMapping(BaseModel):
    """Ordered classes, worst first. The default: I ↔ 0, P/PC ↔ 1–2, C ↔ 3."""

    # A misspelt key ({"metrc": ...}) is a 422 / exit 2 naming it: ignored, it would quietly change agreement.
    model_config = ConfigDict(extra="forbid")

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

    metric: str | None = Field(
        default=None,
        description="Which metric's grade gives the automated label; default: the result's main metric "
        "(answer_relevance when graded).",
    )
    signal: Literal["score", "expected_score"] = Field(
        default="score",
        description="score: the discrete 0–3 score; expected_score: 3 × Σ p(k)·k/3, cut by `thresholds`.",
    )
    thresholds: list[float] | None = Field(
        default=None,
        description="With signal=expected_score: ascending cut points on 0–3 between consecutive classes (one fewer "
        "than classes); default: halfway between the classes' scores (0.5 and 2.5 for I/P/C).",
    )
    verdict: list[VerdictLevel] | None = Field(
        default=None,
        description="A rule over several metrics, best class first; an item meeting none gets the worst class. "
        "Overrides `metric`. Any metric of the rule without an ok grade leaves the label empty.",
    )

    @model_validator(mode="after")
    def _scores_cover_scale_once(self) -> LabelMapping:
        seen = sorted(s for c in self.classes for s in c.scores)
        if seen != [0, 1, 2, 3]:
            raise ValueError("classes must cover the scores 0, 1, 2, 3 exactly once between them")
        names = {c.name for c in self.classes}
        metrics = [self.metric] if self.metric else []
        for level in self.verdict or []:
            if level.label not in names:
                raise ValueError(f"verdict label {level.label!r} is not a class name ({', '.join(sorted(names))})")
            metrics += list(level.when)
            if any(not 0 <= v <= 3 for v in level.when.values()):
                raise ValueError("verdict minimums are on the 0–3 scale")
        unknown = [m for m in metrics if m not in METRIC_NAMES]
        if unknown:
            raise ValueError(f"unknown metric {unknown[0]!r}; known: {', '.join(METRIC_NAMES)}")
        if self.thresholds is not None:
            if len(self.thresholds) != len(self.classes) - 1:
                raise ValueError(f"thresholds needs {len(self.classes) - 1} cut points, one between each two classes")
            if self.thresholds != sorted(self.thresholds) or any(not 0 <= t <= 3 for t in self.thresholds):
                raise ValueError("thresholds must be ascending, on the 0–3 scale")
        return self

    def cut_points(self) -> list[float]:
        """Where 3 × expected score moves to the next class: the thresholds, or halfway between the classes' scores."""
        if self.thresholds is not None:
            return list(self.thresholds)
        ordered = sorted(self.classes, key=lambda c: min(c.scores))
        return [(max(a.scores) + min(b.scores)) / 2 for a, b in pairwise(ordered)]
