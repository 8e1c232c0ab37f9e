"""Render judgements as the seeds' markdown report, so juiz's output reads like the reports people know.

The layout matches examples/seeds/*.txt line for line; its headings are Portuguese (the seeds' own, exactly) or
English, from the one table in juiz.formats.report_format, in the batch's or its items' language.
`juiz.formats.readers.read_triples`
reads either back: a rendered report can be re-imported as triples (with the judge's verdict kept as `reported_*`
extra fields).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from juiz.agreement.labels import VERDICT
from juiz.formats.report_format import (
    NEUTRAL,
    NOT_AVAILABLE,
    SEGMENT_KEYS,
    ReportLanguage,
    heading,
    report_language,
    segment_key,
)
from juiz.judging.language import detect_language
from schemas.judgement import Judgement, JudgementStatus, MetricResult, MetricStatus
from schemas.triple import Segment


def render_report(judgements: Sequence[Judgement], lang: str = "auto") -> str:
    """One block per judgement, each closed by `---`, blocks separated by a blank line; in `lang` (en, pt), or with
    auto in the language the items were graded in (juiz.formats.report_format.report_language)."""
    language = report_language((judgement_language(j) for j in judgements), lang)
    return "\n".join(_render_one(j, position, language) for position, j in enumerate(judgements, start=1))


def write_report(judgements: Sequence[Judgement], path: str | Path, lang: str = "auto") -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(judgements, lang), encoding="utf-8", newline="\n")


def judgement_language(judgement: Judgement) -> str:
    """The language the item was graded in: its prompt's (provenance.prompt is metric@version.lang), else its
    question's."""
    lang = judgement.provenance.prompt.rpartition(".")[2]
    return lang if lang in ("en", "pt") else detect_language(judgement.question)


def _render_one(judgement: Judgement, position: int, lang: ReportLanguage) -> str:
    def bold(key: str, text: str) -> str:
        return f"**{heading(key, lang)}**: {text}"

    extra = judgement.model_extra or {}
    number = _question_number(extra.get("question_number"), position)
    lines = [f"**{heading('question', lang)} {number}**: {judgement.question}"]
    segments = _segments(judgement.context)
    seeds = any(s.source is not None or s.score is not None for s in segments)  # E5's own metadata
    lines += ["", f"**{heading('segments', lang) if seeds else NEUTRAL['segments'][lang]}**:"]
    metrics = judgement.metrics or {}
    relevance = _segment_relevance(metrics.get("context_relevance"))
    for index, segment in enumerate(segments):
        lines += [*_segment_lines(segment, lang, relevance.get(index), seeds), ""]
    if not segments:
        lines += [heading("no_context", lang), ""]
    lines += ["", bold("answer", judgement.answer), ""]
    references = extra.get("references")
    # The seeds always list references, but juiz never invents them: without any, the heading is left out.
    if isinstance(references, list) and references:
        lines += [f"**{heading('references', lang)}**:", *(_reference_line(ref) for ref in references), ""]
    manual = NOT_AVAILABLE if judgement.manual_label is None else str(judgement.manual_label)
    lines += [bold("manual", manual), ""]
    lines += [bold("answer_relevance", _answer_relevance(judgement)), ""]
    # The context metrics, when graded; the automated label below is then the verdict over them (label_source).
    if "completeness" in metrics:
        lines += [bold("completeness", _metric_line(metrics["completeness"])), ""]
    if "groundedness" in metrics:
        lines += [bold("groundedness", _metric_line(metrics["groundedness"])), ""]
    if "context_relevance" in metrics:
        lines += [bold("context_relevance", _metric_line(metrics["context_relevance"])), ""]
    lines += [bold("automated", judgement.automated_label or NOT_AVAILABLE), ""]
    if "groundedness" in metrics and metrics["groundedness"].status is not MetricStatus.SKIPPED:
        lines += [bold("groundedness_reasoning", _metric_reasoning(metrics["groundedness"])), ""]
    lines += [bold("reasoning", _reasoning(judgement)), "", "", "---"]
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


def _segment_lines(
    segment: Segment, lang: ReportLanguage, relevance: str | None = None, seeds: bool = True
) -> list[str]:
    extra = segment.model_extra or {}
    # The seeds' order (source, score, url, start, end); the transcript comes last.
    values: dict[str, object] = {field: getattr(segment, field, None) for field in SEGMENT_KEYS if field != "text"}
    values["url"] = extra.get("url")
    lines = [f"- *{segment_key(field, lang)}:* {value}" for field, value in values.items() if value is not None]
    # Other simple extra fields survive as bullets of their own; the reader turns them back into fields.
    lines += [
        f"- *{name}:* {value}"
        for name, value in extra.items()
        if name != "url" and isinstance(value, str | int | float) and not isinstance(value, bool)
    ]
    if relevance is not None:
        lines.append(f"- *{heading('segment_relevance', lang)}:* {relevance}")
    lines.append(f"- *{segment_key('text', lang) if seeds else NEUTRAL['text'][lang]}:* {segment.text}")
    return lines


def _reference_line(reference: object) -> str:
    text = str(reference).strip()
    return text if text.startswith(("- ", "* ")) else f"- {text}"


def _own_grade(judgement: Judgement) -> MetricResult | None:
    """Answer relevance's own grade when the top level holds the verdict over several metrics; else None (the top
    level is answer relevance's, as in the seeds)."""
    if judgement.label_source != VERDICT or not judgement.metrics:
        return None
    return judgement.metrics.get("answer_relevance")


def _answer_relevance(judgement: Judgement) -> str:
    own = _own_grade(judgement)
    if own is not None:
        return _metric_line(own)
    if judgement.normalized_score is None:
        return f"{NOT_AVAILABLE} ({judgement.status.value})"
    return f"{judgement.normalized_score:.2f}"


def _reasoning(judgement: Judgement) -> str:
    """The judge's chain of thought in the seeds' one-line form; otherwise whatever explains the missing score."""
    own = _own_grade(judgement)
    if own is not None:
        return _metric_reasoning(own)
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
