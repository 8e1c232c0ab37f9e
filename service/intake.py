"""Read a batch submission from a request body: a JSON `{items, options}` object or a JSONL upload.

Everything is validated before anything is stored: the media type (415), limits (413), then nesting depth, options
and every item, and each item's field lengths (422 naming the item's index or line, and its field). Items are
validated by the same code the CLI's readers use.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from litestar.exceptions import HTTPException
from pydantic import TypeAdapter, ValidationError

from juiz.errors import InputError
from juiz.judge import context_segments, validate_options
from juiz.labels import check_labels
from juiz.options import OPTIONS, loads_strict, options_from_text
from juiz.options import validate_options as validate_option_fields
from juiz.readers import (
    FieldMap,
    parse_triples_jsonl,
    validate_triple,  # the readers' one validator: InputError naming the field (as the user wrote it)
)
from juiz.settings import Settings
from schemas import BatchName, BatchOptions, Triple
from service.errors import ITEMS_SOURCE, LimitExceeded

NDJSON = "application/x-ndjson"
JSON = "application/json"
JSONL_TYPES = (NDJSON, "application/jsonl", "application/x-jsonlines")
# The JSONL upload's query parameters: every option (juiz.options derives them from BatchOptions), field_map and the
# batch's name (both fields of schemas.BatchSubmission beside its items and options).
QUERY_PARAMETERS = (*OPTIONS, "field_map", "name")
BODY_FIELDS = ("items", "options", "name", "field_map")
_NAME = TypeAdapter(BatchName)
LENGTH_SETTINGS = {
    "question": "max_question_chars",
    "answer": "max_answer_chars",
    "context": "max_context_chars",
    "extra": "max_extra_chars",
}


@dataclass(frozen=True)
class Submission:
    items: list[Triple]
    options: BatchOptions
    fingerprint: str  # what "the same request body" means for Idempotency-Key
    name: str | None = None


def media_type(content_type: str) -> str:
    return content_type.split(";")[0].strip().lower()


def is_jsonl(content_type: str) -> bool:
    return media_type(content_type) in JSONL_TYPES


def require_media_type(content_type: str | None, accepted: tuple[str, ...]) -> None:
    """415 for a body in a type this route does not read (text/plain, form data …). No header at all is read as
    JSON, as curl and most clients send JSON without one."""
    if content_type is None:
        return
    kind = media_type(content_type)
    if kind not in accepted and not (JSON in accepted and kind.startswith("application/") and kind.endswith("+json")):
        raise HTTPException(
            status_code=415,
            detail=f"unsupported Content-Type {kind!r}: send one of {', '.join(accepted)}",
            extra={"field": "Content-Type"},
        )


def read_submission(
    body: bytes, content_type: str | None, query: Mapping[str, str | list[str]], settings: Settings
) -> Submission:
    """Parse and validate a POST /v1/batches body. Options come from the body (JSON) or the query (JSONL); a query
    parameter that is not an option (or given with a JSON body, whose options are in the body) is a 422 naming it."""
    require_media_type(content_type, (JSON, *JSONL_TYPES))
    content_type = content_type or JSON
    max_items = settings.max_items
    jsonl = is_jsonl(content_type)
    for name in query:
        if name not in QUERY_PARAMETERS or not jsonl:
            where = "known: " + ", ".join(QUERY_PARAMETERS) if jsonl else "a JSON body carries its options in the body"
            raise InputError(f"unknown query parameter ({where})", source="query", field=name)
    text = _text(body)
    if jsonl:
        lines = [number for number, line in enumerate(text.split("\n"), start=1) if line.strip()]
        if len(lines) > max_items:
            raise LimitExceeded("max_items", max_items, len(lines))
        options = read_options(options_from_text({k: v for k, v in query.items() if k in OPTIONS}, source="query"))
        field_map = read_field_map(_last(query.get("field_map")), source="query")
        batch_name = read_name(_last(query.get("name")), source="query")
        try:
            items = parse_triples_jsonl(text, "body", field_map)
        except RecursionError:
            raise InputError(_too_deep(settings), source="body") from None
        for index, item in enumerate(items):
            line = lines[index] if index < len(lines) else None
            segments = item.context if isinstance(item.context, list) else []
            extras = [item.model_extra, *(segment.model_extra for segment in segments)]
            _check_depth(extras, settings, source="body", line=line, field=None)
            _check_lengths(item, settings, source="body", line=line)
        _check_labels(items, options, source="body", lines=lines)
    else:
        data = _json_object(text, settings)
        unknown = sorted(set(data) - set(BODY_FIELDS))
        if unknown:
            expected = ", ".join(f"'{field}'" for field in BODY_FIELDS)
            raise InputError(f"unknown field (expected {expected})", source="body", field=unknown[0])
        raw_items = data.get("items")
        if not isinstance(raw_items, list):
            raise InputError("required: a JSON array of triples", source="body", field="items")
        if len(raw_items) > max_items:
            raise LimitExceeded("max_items", max_items, len(raw_items))
        if not raw_items:
            raise InputError("no items", source="body", field="items")
        _check_depth(data.get("options"), settings, source="body", line=None, field="options")
        options = read_options(data.get("options", {}))  # `options: null` is refused, not read as {}
        field_map = read_field_map(data.get("field_map"))
        batch_name = read_name(data.get("name"), source="body")
        items = [_read_item(obj, settings, ITEMS_SOURCE, index, field_map) for index, obj in enumerate(raw_items)]
        _check_labels(items, options, source=ITEMS_SOURCE, lines=None)
    _check_conversations(items, options, settings)
    canonical = options.model_dump_json() + "\0" + (batch_name or "")
    fingerprint = hashlib.sha256(content_type.encode() + b"\0" + body + b"\0" + canonical.encode()).hexdigest()
    return Submission(items=items, options=options, fingerprint=fingerprint, name=batch_name)


def read_name(raw: object, *, source: str) -> str | None:
    """The batch's `name` (schemas.BatchName): None when absent or blank; InputError naming `name` otherwise."""
    if raw is None:
        return None
    try:
        return _NAME.validate_python(raw) or None
    except ValidationError as exc:
        raise InputError.from_validation(exc, source=source, prefix="name") from None


def _last(value: str | list[str] | None) -> str | None:
    """A query parameter's value; the last one when it was given several times."""
    return value if isinstance(value, str) or value is None else value[-1]


def read_grade_request(body: bytes, content_type: str | None, settings: Settings) -> tuple[Triple, BatchOptions]:
    """POST /v1/grade: `{"item": {...}, "options": {...}}`."""
    require_media_type(content_type, (JSON,))
    data = _json_object(_text(body), settings)
    unknown = sorted(set(data) - {"item", "options", "field_map"})
    if unknown:
        raise InputError("unknown field (expected 'item', 'options', 'field_map')", source="body", field=unknown[0])
    if "item" not in data:
        raise InputError("required field is missing", source="body", field="item")
    _check_depth(data.get("options"), settings, source="body", line=None, field="options")
    options = read_options(data.get("options", {}))
    field_map = read_field_map(data.get("field_map"))
    try:
        triple = _read_item(data["item"], settings, "item", None, field_map)
        _check_labels([triple], options, source="item", lines=None)
    except InputError as exc:
        raise InputError(exc.message, source="body", field=f"item.{exc.field}" if exc.field else "item") from None
    return triple, options


def read_field_map(raw: object, source: str = "body") -> FieldMap | None:
    """`field_map`: a preset name (ragas, common) or a JSON object {their_name: juiz_name}; never a file path."""
    return FieldMap.parse(raw, source=source, files=False, field="field_map")


def _read_item(
    obj: object, settings: Settings, source: str, index: int | None, field_map: FieldMap | None = None
) -> Triple:
    """One item of a JSON body: depth, then the Triple, then its field lengths; InputError names the field as the
    user wrote it (through `field_map`)."""
    if isinstance(obj, dict) and _deeper_than(obj, settings.max_json_depth + 1):  # the item itself is one level
        for name, value in obj.items():  # only then: which field
            _check_depth(value, settings, source=source, line=index, field=str(name))
    triple = validate_triple(obj, source, index, field_map)
    _check_lengths(triple, settings, source=source, line=index)
    return triple


def _check_labels(items: list[Triple], options: BatchOptions, *, source: str, lines: list[int] | None) -> None:
    """juiz.labels.check_labels, naming the item by its index (JSON) or line (JSONL)."""
    try:
        check_labels([item.manual_label for item in items], options.label_mapping)
    except InputError as exc:
        position = exc.line or 0
        line = lines[position] if lines is not None else (position if source == ITEMS_SOURCE else None)
        raise InputError(exc.message, source=source, line=line, field="manual_label") from None


def conversations(item: Triple, options: BatchOptions) -> int:
    """Replies the engine generates for one item: one per segment for context relevance, `samples` per other metric
    (an upper bound: metrics skipped for want of a context are counted)."""
    segments = max(1, len(context_segments(item.context)))
    return sum(segments if metric == "context_relevance" else options.samples for metric in options.metrics)


def _check_conversations(items: list[Triple], options: BatchOptions, settings: Settings) -> None:
    limit = settings.max_batch_conversations
    total = sum(conversations(item, options) for item in items)
    if total > limit:
        raise LimitExceeded("max_batch_conversations", limit, total, what="engine conversations")


def _check_lengths(triple: Triple, settings: Settings, *, source: str, line: int | None) -> None:
    # Each segment is an engine conversation of its own for context relevance: 10,000 tiny segments would be 10,000
    # conversations inside calls shared with other tenants.
    segments = len(triple.context) if isinstance(triple.context, list) else 1
    if segments > settings.max_segments:
        raise InputError(
            f"{segments} segments; at most {settings.max_segments} allowed by max_segments (env JUIZ_MAX_SEGMENTS)",
            source=source,
            line=line,
            field="context",
        )
    for name, length in triple.text_lengths().items():
        setting = LENGTH_SETTINGS[name]
        limit: int = getattr(settings, setting)
        if length > limit:
            raise InputError(
                f"{length} characters; at most {limit} allowed by {setting} (env JUIZ_{setting.upper()})",
                source=source,
                line=line,
                field="extra fields" if name == "extra" else name,
            )


def _check_depth(value: object, settings: Settings, *, source: str, line: int | None, field: str | None) -> None:
    """JSON arrays/objects nested deeper than max_json_depth are refused: deep values would blow Python's recursion
    limit wherever they are later copied or serialised (pydantic, the store, the engine's prompt)."""
    if _deeper_than(value, settings.max_json_depth):
        raise InputError(_too_deep(settings), source=source, line=line, field=field)


def _deeper_than(value: object, limit: int) -> bool:
    """Whether arrays/objects nest more than `limit` levels in `value` (iterative: no recursion to exhaust)."""
    stack: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def read_options(raw: Any) -> BatchOptions:
    """Validate options; a prompt id that does not exist is a PromptError (422 on options.prompt)."""
    options = validate_option_fields(raw, source="options", prefix="options")
    validate_options(options)
    return options


def _text(body: bytes) -> str:
    try:
        return body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (bad byte at offset {exc.start})", source="body") from None


def _too_deep(settings: Settings) -> str:
    return f"JSON nested deeper than {settings.max_json_depth} levels (max_json_depth)"


def _json_object(text: str, settings: Settings) -> dict[str, Any]:
    try:
        data = loads_strict(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON: {exc.msg} (column {exc.colno})", source="body", line=exc.lineno) from None
    except ValueError as exc:  # NaN, Infinity, 1e400: JSON has no such numbers
        raise InputError(f"malformed JSON: {exc}", source="body") from None
    except RecursionError:  # the C parser stops at Python's recursion limit (~100,000-deep bodies)
        raise InputError(_too_deep(settings), source="body") from None
    if not isinstance(data, dict):
        raise InputError("expected a JSON object", source="body")
    return data
