"""Read triples to grade (JSONL, JSON, CSV, the seeds' markdown reports) and read/write judgement JSONL.

Every problem with user input becomes an `InputError` naming the file, the line (or JSON item) and the field, so
the CLI and the HTTP service can point at the exact spot instead of dumping a pydantic traceback.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel, ValidationError

from juiz.formats.encodable import NOT_TEXT, unencodable
from juiz.formats.report_format import (
    DEFAULT_LANGUAGE,
    HEADINGS,
    NEUTRAL,
    NOT_AVAILABLE,
    REPORT_LANGUAGES,
    SEGMENT_KEYS,
    ReportLanguage,
    heading,
)
from juiz.runtime.errors import InputError
from schemas.annotation import AnnotationRecord
from schemas.judgement import Judgement
from schemas.triple import Triple

M = TypeVar("M", bound=BaseModel)

JSONL_SUFFIXES = (".jsonl", ".ndjson")
REPORT_SUFFIXES = (".md", ".txt")

# The seeds' report format, in either language (juiz.formats.report_format: one table; juiz.formats.report writes the
# same strings).
# Only these headings open a section: an answer that contains other bold text ("**Nota**: …") stays one answer. The
# report's first question heading decides its language, so "**Question 2**:" inside a Portuguese answer is text.
_SECTIONS = [key for key in HEADINGS if key not in ("question", "no_context", "segment_relevance")]
_SECTION_OF: dict[ReportLanguage, dict[str, str]] = {
    lang: {heading(key, lang): key for key in _SECTIONS} | {NEUTRAL["segments"][lang]: "segments"}
    for lang in REPORT_LANGUAGES
}
_HEADING: dict[ReportLanguage, re.Pattern[str]] = {
    lang: re.compile(r"^\*\*(?P<name>" + "|".join(map(re.escape, names)) + r")\*\*:[ \t]?(?P<rest>.*)$")
    for lang, names in _SECTION_OF.items()
}
_QUESTION_HEADING: dict[ReportLanguage, re.Pattern[str]] = {
    lang: re.compile(
        r"^\*\*" + re.escape(heading("question", lang)) + r"(?:[ \t]+(?P<number>\d+))?\*\*:[ \t]?(?P<rest>.*)$"
    )
    for lang in REPORT_LANGUAGES
}
# A segment's bullet key (in either language) → the Segment field it fills.
_SEGMENT_FIELD = {key: field for field, keys in SEGMENT_KEYS.items() for key in keys.values()} | {
    key: "text" for key in NEUTRAL["text"].values()
}
_FIRST_SEGMENT_KEYS = frozenset(SEGMENT_KEYS["source"].values())  # a bullet that opens a segment
_NO_CONTEXT = frozenset(HEADINGS["no_context"].values())
_SEGMENT_LINE = re.compile(r"^- \*(?P<key>[^*]+?):\*[ \t]?(?P<value>.*)$")
_REPORTED_NA = re.compile(r"^n/a(?:\s*\((?P<status>[^)]*)\))?$", re.IGNORECASE)


# --- other tools' field names ------------------------------------------------------------------------------------

# Presets: their name → juiz's. RAGAS's `reference` (the ground-truth answer) keeps its name and is passed through.
FIELD_MAP_PRESETS: dict[str, dict[str, str]] = {
    "ragas": {"user_input": "question", "retrieved_contexts": "context", "response": "answer"},
    "common": {"query": "question", "contexts": "context", "response": "answer", "ground_truth": "reference"},
}


@dataclass(frozen=True)
class FieldMap:
    """Renames an input item's fields (their name → juiz's) before it is validated; a list of strings renamed to
    `context` becomes segments. Errors still name the field as the user wrote it."""

    renames: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(
        cls, value: object, source: str = "--field-map", *, files: bool = True, field: str | None = None
    ) -> FieldMap | None:
        """A preset name (`ragas`, `common`), a JSON object {their_name: juiz_name} inline or (with `files`, the CLI
        only: never a path sent to the API) in a file, or a mapping. None for no map. InputError naming `source`."""
        if value is None or value == "":
            return None
        if isinstance(value, str) and value in FIELD_MAP_PRESETS:
            return cls(FIELD_MAP_PRESETS[value])
        data: object = value
        if isinstance(value, str):
            text = value
            if not value.lstrip().startswith("{"):
                if not files:
                    presets = ", ".join(FIELD_MAP_PRESETS)
                    raise InputError(f"not a preset ({presets}) or a JSON object", source=source, field=field)
                try:
                    text = Path(value).read_text(encoding="utf-8")
                except OSError:
                    presets = ", ".join(FIELD_MAP_PRESETS)
                    raise InputError(
                        f"not a preset ({presets}), inline JSON or a readable file", source=source
                    ) from None
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InputError(
                    f"malformed JSON: {exc.msg} (column {exc.colno})", source=source, field=field
                ) from None
        if not isinstance(data, Mapping) or not all(isinstance(v, str) and v for v in data.values()):
            raise InputError(
                'expected a preset name or a JSON object of names, e.g. {"query": "question"}',
                source=source,
                field=field,
            )
        targets = list(data.values())
        repeated = sorted({t for t in targets if targets.count(t) > 1})
        if repeated:
            raise InputError(f"two fields are mapped to {repeated[0]!r}", source=source, field=field or repeated[0])
        return cls({str(k): str(v) for k, v in data.items()})

    def user_name(self, juiz_name: str) -> str:
        """The name the user wrote for one of juiz's fields (for error messages)."""
        for theirs, ours in self.renames.items():
            if ours == juiz_name:
                return theirs
        return juiz_name

    def user_field(self, field_path: str | None) -> str | None:
        """A dotted error path (`context.2.text`) with its first part as the user wrote it."""
        if field_path is None:
            return None
        head, dot, rest = field_path.partition(".")
        return self.user_name(head) + dot + rest

    def apply(self, obj: object, source: str, line: int | None) -> object:
        """The item with juiz's names; an object that is not a dict is left for validation to reject."""
        if not isinstance(obj, dict):
            return obj
        renamed: dict[str, Any] = {}
        for name, value in obj.items():
            target = self.renames.get(name, name)
            if target in renamed:
                raise InputError(
                    f"both {self.user_name(target)!r} and {target!r} given for {target!r}",
                    source=source,
                    line=line,
                    field=name,
                )
            renamed[target] = value
        if isinstance(renamed.get("context"), list):
            renamed["context"] = _as_segments(renamed["context"])
        return renamed


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 parses as inf: refused, never stored as null
        raise ValueError(f"{text} is out of range for a number")
    return value


_COUNT_CHUNK = 1 << 22  # bytes per numpy pass: a few MB of temporaries whatever the body's size
_QUOTE, _OBJECT, _ARRAY, _COMMA = (ord(c) for c in '"{[,')


def count_values(body: bytes) -> int:
    """Objects, arrays and the elements after each one's first (commas), outside strings: about as many as the
    values a parse would build, counted on the bytes (numpy, a chunk at a time) with no object made. Bounds what a
    parse may cost before it runs (64 MiB of `{"text":"a"},` would be 5 million dicts, then 5 million models)."""
    # An escaped backslash, then an escaped quote, neither opens nor closes a string (copies only if present).
    data = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    array = np.frombuffer(data, dtype=np.uint8)
    total, inside = 0, 0
    for start in range(0, len(array), _COUNT_CHUNK):
        part = array[start : start + _COUNT_CHUNK]
        quotes = part == _QUOTE
        outside = ((np.cumsum(quotes, dtype=np.uint8) + inside) & 1) == 0  # uint8 wraps: parity survives
        structural = (part == _OBJECT) | (part == _ARRAY) | (part == _COMMA)
        total += int(np.count_nonzero(structural & outside))
        inside = (inside + int(np.count_nonzero(quotes))) & 1
    return total


def loads_strict(text: str | bytes) -> Any:
    """`json.loads` refusing what the JSON standard refuses and Python accepts: NaN, Infinity, and numbers too large to
    be finite (1e400), which would otherwise be stored as null or inf. A ValueError (JSONDecodeError or not) on them."""
    import json

    return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)


def validate_triple(obj: object, source: str, line: int | None, field_map: FieldMap | None = None) -> Triple:
    """One item → Triple, through the field map when there is one; InputError names the field as the user wrote it."""
    if field_map is None:
        return validate_model(Triple, obj, source, line)
    return _validated(field_map.apply(obj, source, line), source, line, field_map)


def _validated(obj: object, source: str, line: int | None, field_map: FieldMap | None) -> Triple:
    """Validate an item already in juiz's names; errors translated back to the user's names."""
    try:
        return validate_model(Triple, obj, source, line)
    except InputError as exc:
        if field_map is None:
            raise
        raise InputError(exc.message, source=exc.source, line=exc.line, field=field_map.user_field(exc.field)) from None


def _as_segments(context: list[Any]) -> list[Any]:
    """RAGAS-style contexts: plain strings, one per retrieved passage → segments `{text}`."""
    return [{"text": c} if isinstance(c, str) else c for c in context]


def read_triples(path: str | Path, field_map: FieldMap | None = None) -> list[Triple]:
    """Read every triple in a file, choosing the format by its extension; `field_map` renames the user's fields
    (JSONL, JSON, CSV; the seeds' report format has juiz's own headings).

    A folder reads every file in it with a known extension, in name order (e.g. a folder of seed reports).
    Raises InputError for an unknown extension, an unreadable or empty file, malformed content or an invalid triple.
    """
    path = Path(path)
    source = str(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in _known_suffixes())
        if not files:
            raise InputError(f"no file with a known extension ({', '.join(_known_suffixes())})", source=source)
        return [t for file in files for t in read_triples(file, field_map)]
    suffix = path.suffix.lower()
    parsers: dict[str, Callable[[str, str, FieldMap | None], list[Triple]]] = {
        **dict.fromkeys(JSONL_SUFFIXES, _parse_jsonl),
        ".json": _parse_json,
        ".csv": _parse_csv,
        **dict.fromkeys(REPORT_SUFFIXES, _parse_report),
    }
    parser = parsers.get(suffix)
    if parser is None:
        known = ", ".join(sorted(parsers))
        raise InputError(f"unknown file type '{suffix or '(none)'}'; expected one of {known}", source=source)
    triples = parser(_read_text(path), source, field_map)
    if not triples:
        raise InputError("no triples", source=source)
    return triples


def _known_suffixes() -> list[str]:
    return sorted({*JSONL_SUFFIXES, ".json", ".csv", *REPORT_SUFFIXES})


def parse_triples_jsonl(text: str, source: str, field_map: FieldMap | None = None) -> list[Triple]:
    """Parse a JSONL body (e.g. an HTTP upload); `source` names it in errors. Raises InputError like read_triples."""
    triples = _parse_jsonl(text.removeprefix("\ufeff"), source, field_map)
    if not triples:
        raise InputError("no triples", source=source)
    return triples


def read_judgements(path: str | Path) -> list[Judgement]:
    """Read a results JSONL file written by `write_judgements`. An empty file is an empty result, not an error."""
    path = Path(path)
    source = str(path)
    return [validate_model(Judgement, obj, source, n) for n, obj in _jsonl_objects(_read_text(path), source)]


def read_annotations(path: str | Path) -> list[AnnotationRecord]:
    """Read a labels file (a labelled set): one JSON object per line, an annotation and the item it labels by `id`
    or by the triple's content key (`triple`)."""
    path = Path(path)
    source = str(path)
    return [validate_model(AnnotationRecord, obj, source, n) for n, obj in _jsonl_objects(_read_text(path), source)]


def write_judgements(judgements: Iterable[Judgement], path: str | Path) -> None:
    """Write one JSON object per line, UTF-8 and unescaped, so results stay readable and diffable."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="\n") as out:
        for judgement in judgements:
            out.write(json.dumps(judgement.model_dump(mode="json"), ensure_ascii=False) + "\n")


def _read_text(path: Path) -> str:
    # utf-8-sig: spreadsheets and Windows editors often start CSV/JSON files with a byte-order mark.
    source = str(path)
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError("no such file", source=source) from None
    except IsADirectoryError:
        raise InputError("is a directory, not a file", source=source) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (bad byte at offset {exc.start})", source=source) from None
    except OSError as exc:
        raise InputError(f"can't read file: {exc.strerror or exc}", source=source) from None


def validate_model(model: type[M], obj: object, source: str, line: int | None) -> M:
    """Validate one object, turning pydantic's error list into one InputError that names the first bad field."""
    if not isinstance(obj, dict):
        raise InputError(f"expected a JSON object, got {_json_type(obj)}", source=source, line=line)
    if (where := unencodable(obj)) is not None:
        raise InputError(NOT_TEXT, source=source, line=line, field=where or None)
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        raise InputError.from_validation(exc, source=source, line=line) from None


def _json_type(value: object) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _jsonl_objects(text: str, source: str) -> list[tuple[int, Any]]:
    """Decode each non-blank line; split on "\\n" only, since JSON strings may hold U+2028 that splitlines() cuts."""
    objects = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            objects.append((number, loads_strict(line)))
        except json.JSONDecodeError as exc:
            raise InputError(f"malformed JSON: {exc.msg} (column {exc.colno})", source=source, line=number) from None
        except ValueError as exc:  # NaN, Infinity, 1e400
            raise InputError(f"malformed JSON: {exc}", source=source, line=number) from None
    return objects


def _parse_jsonl(text: str, source: str, field_map: FieldMap | None = None) -> list[Triple]:
    return [validate_triple(obj, source, number, field_map) for number, obj in _jsonl_objects(text, source)]


def _parse_json(text: str, source: str, field_map: FieldMap | None = None) -> list[Triple]:
    """A JSON array of triples, or an object with an "items" array (so a saved batch submission reads as-is)."""
    if not text.strip():
        return []
    try:
        data = loads_strict(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON: {exc.msg} (column {exc.colno})", source=source, line=exc.lineno) from None
    except ValueError as exc:  # NaN, Infinity, 1e400
        raise InputError(f"malformed JSON: {exc}", source=source) from None
    if isinstance(data, dict) and "items" in data:
        data = data["items"]
        if not isinstance(data, list):
            raise InputError(f"'items' must be an array, got {_json_type(data)}", source=source, field="items")
    elif not isinstance(data, list):
        raise InputError(
            f"expected a JSON array of triples or an object with an 'items' array, got {_json_type(data)}",
            source=source,
        )
    # For JSON the "line" is the 1-based item index: line numbers of pretty-printed JSON are not worth tracking.
    return [validate_triple(obj, source, index, field_map) for index, obj in enumerate(data, start=1)]


def _parse_csv(text: str, source: str, field_map: FieldMap | None = None) -> list[Triple]:
    """Header row + one triple per row. Empty cells are absent fields; unknown columns become extra fields."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        written = [name.strip() for name in next(reader, [])]
        if not any(written):
            return []
        _check_csv_header(written, source, field_map)
        # Columns are renamed once, here; errors name them as written (the header's own names).
        header = [field_map.renames.get(name, name) for name in written] if field_map else written
        triples = []
        last_line = reader.line_num
        for row in reader:
            # A quoted cell may span lines: the row starts right after the previous record ended.
            line, last_line = last_line + 1, reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if len(row) > len(header):
                raise InputError(f"row has {len(row)} cells but the header has {len(header)}", source=source, line=line)
            # Only empty cells are absent: a question of spaces must say "blank", not "missing".
            obj: dict[str, Any] = {name: cell for name, cell in zip(header, row, strict=False) if cell}
            if "context" in obj:
                obj["context"] = _csv_context(obj["context"])
            if "manual_label" in obj:
                obj["manual_label"] = _label_from_text(obj["manual_label"])
                if obj["manual_label"] == "":
                    del obj["manual_label"]
            if field_map is not None and isinstance(obj.get("context"), list):
                obj["context"] = _as_segments(obj["context"])
            triples.append(_validated(obj, source, line, field_map))
        return triples
    except csv.Error as exc:
        raise InputError(f"malformed CSV: {exc}", source=source, line=reader.line_num) from None


def _check_csv_header(header: list[str], source: str, field_map: FieldMap | None = None) -> None:
    for index, name in enumerate(header, start=1):
        if not name:
            raise InputError(f"column {index} of the header has no name", source=source, line=1)
    duplicates = sorted({name for name in header if header.count(name) > 1})
    if duplicates:
        raise InputError(f"duplicate column(s): {', '.join(duplicates)}", source=source, line=1)
    renamed = [field_map.renames.get(name, name) for name in header] if field_map else header
    for required in ("question", "answer"):
        if required not in renamed:
            name = field_map.user_name(required) if field_map else required
            raise InputError(f"the header has no '{name}' column", source=source, line=1, field=name)


def _csv_context(cell: str) -> object:
    """A cell holding a JSON array is a list of segments; anything else (even "[1] …" prose) is plain context."""
    if cell.lstrip().startswith("["):
        try:
            parsed = json.loads(cell)
        except json.JSONDecodeError:
            return cell
        if isinstance(parsed, list):
            return parsed
    return cell


def _label_from_text(text: str) -> str | int | float:
    """Numbers written as text ("3", "0.67") become numbers, so CSV and report labels equal their JSON spelling."""
    value = text.strip()
    if re.fullmatch(r"[+-]?\d+", value):
        return int(value)
    if re.fullmatch(r"[+-]?(\d+\.\d*|\.\d+)", value):
        return float(value)
    return value


# --- the seeds' markdown report format -------------------------------------------------------------------------


def _parse_report(text: str, source: str, field_map: FieldMap | None = None) -> list[Triple]:
    """Each `**Pergunta N**:` (`**Question N**:`) heading opens a triple; `---` lines between them are separators.

    Items are cut at the question headings rather than at `---`, because a judge's reasoning or an answer may hold
    a markdown rule of its own; only the `---` that closes an item is dropped.
    """
    lines = text.split("\n")
    lang = _report_language(lines)
    question = _QUESTION_HEADING[lang]
    starts = [index for index, line in enumerate(lines) if question.match(line)]
    triples = []
    for position, start in enumerate(starts, start=1):
        end = starts[position] if position < len(starts) else len(lines)
        block = lines[start:end]
        while block and not block[-1].strip():
            block.pop()
        if len(block) > 1 and block[-1].strip() == "---":
            block.pop()
        triples.append(_parse_report_item(block, start + 1, position, source, lang))
    return triples


def _report_language(lines: list[str]) -> ReportLanguage:
    """The language of the report's first question heading (the seeds' Portuguese when there is none)."""
    for line in lines:
        for lang, pattern in _QUESTION_HEADING.items():
            if pattern.match(line):
                return lang
    return DEFAULT_LANGUAGE


def _parse_report_item(block: list[str], first_line: int, position: int, source: str, lang: ReportLanguage) -> Triple:
    first = _QUESTION_HEADING[lang].match(block[0])
    assert first is not None  # _parse_report cut the block at this heading
    sections: dict[str, tuple[int, list[str]]] = {"question": (first_line, [first["rest"]])}
    current = "question"
    for offset, line in enumerate(block[1:], start=1):
        match = _HEADING[lang].match(line)
        section = _SECTION_OF[lang][match["name"]] if match else None
        if match and section is not None and section not in sections:
            current = section
            sections[current] = (first_line + offset, [match["rest"]])
        else:
            sections[current][1].append(line)

    def text_of(name: str) -> str | None:
        return "\n".join(sections[name][1]).strip() if name in sections else None

    obj: dict[str, Any] = {"question": text_of("question"), "answer": text_of("answer") or ""}
    if first["number"] is not None:
        obj["id"] = f"q{int(first['number'])}"
        obj["question_number"] = int(first["number"])
    else:
        obj["id"] = f"item-{position}"
    if "segments" in sections:
        segments_line, content = sections["segments"]
        context = _parse_segments(content, segments_line, source)
        if context is not None:
            obj["context"] = context
    if "references" in sections:
        obj["references"] = [ref.strip() for ref in sections["references"][1] if ref.strip()]
    manual = text_of("manual")
    if manual and manual.lower() != NOT_AVAILABLE:
        obj["manual_label"] = _label_from_text(manual)
    ar = text_of("answer_relevance")
    if ar:
        _parse_reported_ar(ar, obj, sections["answer_relevance"][0], source)
    automated = text_of("automated")
    if automated and automated.lower() != NOT_AVAILABLE:
        obj["reported_automated_label"] = automated
    reasoning = text_of("reasoning")
    if reasoning is not None:
        obj["reported_reasoning"] = reasoning
    return validate_model(Triple, obj, source, first_line)


def _parse_reported_ar(text: str, obj: dict[str, Any], line: int, source: str) -> None:
    not_available = _REPORTED_NA.match(text)
    if not_available:
        if not_available["status"]:
            obj["reported_status"] = not_available["status"].strip()
        return
    try:
        obj["reported_answer_relevance"] = float(text)
    except ValueError:
        raise InputError(
            f"answer relevance '{text}' is neither a number nor n/a",
            source=source,
            line=line,
            field="reported_answer_relevance",
        ) from None


def _parse_segments(content: list[str], first_line: int, source: str) -> str | list[dict[str, Any]] | None:
    """Parse the `- *Key:* value` bullets; a line that is no bullet continues the previous value (multi-line text).

    A segment starts at `Corpus ID` or when a key repeats, so segments without a corpus id still split correctly.
    Returns None for "(sem contexto)" ("(no context)") or an empty section, and the plain text when there are no
    bullets at all.
    """
    body = "\n".join(content).strip()
    if not body or body in _NO_CONTEXT:
        return None
    if not any(_SEGMENT_LINE.match(line) for line in content):
        return body
    segments: list[dict[str, Any]] = []
    values: dict[str, list[str]] = {}
    lines_of: dict[str, int] = {}
    key: str | None = None
    for offset, line in enumerate(content):
        match = _SEGMENT_LINE.match(line)
        if match:
            key = match["key"].strip()
            if values and (key in _FIRST_SEGMENT_KEYS or key in values):
                segments.append(_segment(values, lines_of, len(segments), source))
                values, lines_of = {}, {}
            values[key] = [match["value"]]
            lines_of[key] = first_line + offset
        elif key is not None:
            values[key].append(line)
        elif line.strip():
            raise InputError(
                "text before the first segment bullet", source=source, line=first_line + offset, field="context"
            )
    segments.append(_segment(values, lines_of, len(segments), source))
    return segments


def _segment(values: dict[str, list[str]], lines_of: dict[str, int], index: int, source: str) -> dict[str, Any]:
    segment: dict[str, Any] = {}
    for key, parts in values.items():
        value = "\n".join(parts).strip()
        field = _SEGMENT_FIELD.get(key) or re.sub(r"\W+", "_", key.lower()).strip("_")
        if field == "score":
            try:
                segment[field] = float(value)
            except ValueError:
                raise InputError(
                    f"segment score '{value}' is not a number",
                    source=source,
                    line=lines_of[key],
                    field=f"context.{index}.score",
                ) from None
        else:
            segment[field] = value
    return segment
