"""Render judgements as the seeds' Portuguese markdown report, so juiz's output reads like the reports people know.

The layout matches examples/seeds/*.txt line for line, and `juiz.readers.read_triples` reads it back: a rendered
report can be re-imported as triples (with the judge's verdict kept as `reported_*` extra fields).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from juiz.readers import (
    H_ANSWER,
    H_AR,
    H_AUTOMATED,
    H_CONTEXT_RELEVANCE,
    H_G_REASONING,
    H_GROUNDEDNESS,
    H_MANUAL,
    H_QUESTION,
    H_REASONING,
    H_REFERENCES,
    H_SEGMENTS,
    NO_CONTEXT,
    NOT_AVAILABLE,
    SEGMENT_KEYS,
    SEGMENT_RELEVANCE_KEY,
)
from schemas.judgement import Judgement, JudgementStatus, MetricResult, MetricStatus
from schemas.triple import Segment

_FIELD_KEYS = {field: key for key, field in SEGMENT_KEYS.items()}
_SEGMENT_FIELDS = ("source", "score", "url", "start", "end")  # the seeds' order; the transcript comes last


def render_report(judgements: Sequence[Judgement]) -> str:
    """One block per judgement, each closed by `---`, blocks separated by a blank line."""
    return "\n".join(_render_one(judgement, position) for position, judgement in enumerate(judgements, start=1))


def write_report(judgements: Sequence[Judgement], path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(judgements), encoding="utf-8", newline="\n")


def _render_one(judgement: Judgement, position: int) -> str:
    extra = judgement.model_extra or {}
    lines = [f"**{H_QUESTION} {_question_number(extra.get('question_number'), position)}**: {judgement.question}"]
    lines += ["", f"**{H_SEGMENTS}**:"]
    segments = _segments(judgement.context)
    metrics = judgement.metrics or {}
    relevance = _segment_relevance(metrics.get("context_relevance"))
    for index, segment in enumerate(segments):
        lines += [*_segment_lines(segment, relevance.get(index)), ""]
    if not segments:
        lines += [NO_CONTEXT, ""]
    lines += ["", f"**{H_ANSWER}**: {judgement.answer}", ""]
    references = extra.get("references")
    # The seeds always list references, but juiz never invents them: without any, the heading is left out.
    if isinstance(references, list) and references:
        lines += [f"**{H_REFERENCES}**:", *(_reference_line(ref) for ref in references), ""]
    manual = NOT_AVAILABLE if judgement.manual_label is None else str(judgement.manual_label)
    lines += [f"**{H_MANUAL}**: {manual}", ""]
    lines += [f"**{H_AR}**: {_answer_relevance(judgement)}", ""]
    # The context metrics, when graded; the automated label below is then the verdict over them.
    if "groundedness" in metrics:
        lines += [f"**{H_GROUNDEDNESS}**: {_metric_line(metrics['groundedness'])}", ""]
    if "context_relevance" in metrics:
        lines += [f"**{H_CONTEXT_RELEVANCE}**: {_metric_line(metrics['context_relevance'])}", ""]
    lines += [f"**{H_AUTOMATED}**: {judgement.automated_label or NOT_AVAILABLE}", ""]
    if "groundedness" in metrics and metrics["groundedness"].status is not MetricStatus.SKIPPED:
        lines += [f"**{H_G_REASONING}**: {_metric_reasoning(metrics['groundedness'])}", ""]
    lines += [f"**{H_REASONING}**: {_reasoning(judgement)}", "", "", "---"]
    return "\n".join(lines) + "\n"


def _question_number(value: object, position: int) -> int:
    """The original question number when the triple came from a report (or carried one), else the position."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return position


def _segments(context: str | list[Segment] | None) -> list[Segment]:
    if isinstance(context, str):
        return [Segment(text=context)] if context.strip() else []
    return list(context or [])


def _segment_relevance(result: MetricResult | None) -> dict[int, str]:
    """Segment index → its context-relevance grade as the report shows it (normalised score, like AR)."""
    if result is None or result.segments is None:
        return {}
    return {
        s.index: f"{s.normalized_score:.2f}"
        if s.normalized_score is not None
        else f"{NOT_AVAILABLE} ({s.status.value})"
        for s in result.segments
    }


def _metric_line(result: MetricResult) -> str:
    """A metric's grade in the AR line's form: the normalised score, or n/a with the status (and why)."""
    if result.normalized_score is None:
        reason = f": {result.error}" if result.status is MetricStatus.SKIPPED and result.error else ""
        return f"{NOT_AVAILABLE} ({result.status.value}{reason})"
    line = f"{result.normalized_score:.2f}"
    if result.segments is not None:
        line += f" ({result.aggregate} of {len(result.segments)} segments)"
    return line


def _metric_reasoning(result: MetricResult) -> str:
    if result.status is MetricStatus.OK:
        parts = [f"Criteria: {result.criteria}"] if result.criteria else []
        if result.supporting_evidence:
            parts.append(f"Supporting Evidence: {result.supporting_evidence}")
        parts.append(f"Score: {result.score}")
        return " ".join(parts)
    return result.raw_output or result.error or NOT_AVAILABLE


def _segment_lines(segment: Segment, relevance: str | None = None) -> list[str]:
    extra = segment.model_extra or {}
    values: dict[str, object] = {field: getattr(segment, field, None) for field in _SEGMENT_FIELDS}
    values["url"] = extra.get("url")
    lines = [f"- *{_FIELD_KEYS[field]}:* {value}" for field, value in values.items() if value is not None]
    # Other simple extra fields survive as bullets of their own; the reader turns them back into fields.
    lines += [
        f"- *{name}:* {value}"
        for name, value in extra.items()
        if name != "url" and isinstance(value, str | int | float) and not isinstance(value, bool)
    ]
    if relevance is not None:
        lines.append(f"- *{SEGMENT_RELEVANCE_KEY}:* {relevance}")
    lines.append(f"- *{_FIELD_KEYS['text']}:* {segment.text}")
    return lines


def _reference_line(reference: object) -> str:
    text = str(reference).strip()
    return text if text.startswith(("- ", "* ")) else f"- {text}"


def _answer_relevance(judgement: Judgement) -> str:
    if judgement.normalized_score is None:
        return f"{NOT_AVAILABLE} ({judgement.status.value})"
    return f"{judgement.normalized_score:.2f}"


def _reasoning(judgement: Judgement) -> str:
    """The judge's chain of thought in the seeds' one-line form; otherwise whatever explains the missing score."""
    if judgement.status is JudgementStatus.OK:
        parts = []
        if judgement.criteria is not None:
            parts.append(f"Criteria: {judgement.criteria}")
        if judgement.supporting_evidence is not None:
            parts.append(f"Supporting Evidence: {judgement.supporting_evidence}")
        parts.append(f"Score: {NOT_AVAILABLE if judgement.score is None else judgement.score}")
        return " ".join(parts)
    if judgement.status is JudgementStatus.PARSE_ERROR:
        return judgement.raw_output or judgement.error or NOT_AVAILABLE
    return judgement.error or judgement.raw_output or NOT_AVAILABLE
