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
from pydantic import ValidationError

from juiz.errors import InputError
from juiz.judge import validate_options
from juiz.readers import (
    FieldMap,
    parse_triples_jsonl,
    validate_triple,  # the readers' one validator: InputError naming the field (as the user wrote it)
)
from juiz.settings import Settings
from schemas import BatchOptions, Triple
from service.errors import ITEMS_SOURCE, LimitExceeded

NDJSON = "application/x-ndjson"
JSON = "application/json"
JSONL_TYPES = (NDJSON, "application/jsonl", "application/x-jsonlines")
OPTION_FIELDS = ("metric", "metrics", "prompt", "lang", "mode", "label_mapping", "samples", "temperature")
# Query values that hold a list, written comma-separated (?metrics=answer_relevance,groundedness).
LIST_OPTIONS = ("metrics", "prompt")
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


def read_submission(body: bytes, content_type: str | None, query: Mapping[str, str], settings: Settings) -> Submission:
    """Parse and validate a POST /v1/batches body. Options come from the body (JSON) or the query (JSONL)."""
    require_media_type(content_type, (JSON, *JSONL_TYPES))
    content_type = content_type or JSON
    max_items = settings.max_items
    text = _text(body)
    if is_jsonl(content_type):
        lines = [number for number, line in enumerate(text.split("\n"), start=1) if line.strip()]
        if len(lines) > max_items:
            raise LimitExceeded("max_items", max_items, len(lines))
        options = read_options({k: v for k, v in query.items() if k in OPTION_FIELDS}, from_query=True)
        field_map = read_field_map(query.get("field_map"), source="query")
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
    else:
        data = _json_object(text, settings)
        unknown = sorted(set(data) - {"items", "options", "field_map"})
        if unknown:
            raise InputError(
                "unknown field (expected 'items', 'options', 'field_map')", source="body", field=unknown[0]
            )
        raw_items = data.get("items")
        if not isinstance(raw_items, list):
            raise InputError("required: a JSON array of triples", source="body", field="items")
        if len(raw_items) > max_items:
            raise LimitExceeded("max_items", max_items, len(raw_items))
        if not raw_items:
            raise InputError("no items", source="body", field="items")
        _check_depth(data.get("options"), settings, source="body", line=None, field="options")
        options = read_options(data.get("options") or {})
        field_map = read_field_map(data.get("field_map"))
        items = [_read_item(obj, settings, ITEMS_SOURCE, index, field_map) for index, obj in enumerate(raw_items)]
    canonical_options = options.model_dump_json()
    fingerprint = hashlib.sha256(content_type.encode() + b"\0" + body + b"\0" + canonical_options.encode()).hexdigest()
    return Submission(items=items, options=options, fingerprint=fingerprint)


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
    options = read_options(data.get("options") or {})
    field_map = read_field_map(data.get("field_map"))
    try:
        triple = _read_item(data["item"], settings, "item", None, field_map)
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


def _check_lengths(triple: Triple, settings: Settings, *, source: str, line: int | None) -> None:
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


def read_options(raw: Any, *, from_query: bool = False) -> BatchOptions:
    """Validate options; a prompt id that does not exist is a PromptError (422 on options.prompt)."""
    if not isinstance(raw, dict):
        raise InputError("expected a JSON object", source="body", field="options")
    values = dict(raw)
    for name in LIST_OPTIONS if from_query else ():
        if name in values:
            parts = [part.strip() for part in values[name].split(",") if part.strip()]
            values[name] = parts if name == "metrics" or len(parts) > 1 else values[name]
    if from_query and "label_mapping" in values:
        try:
            values["label_mapping"] = json.loads(values["label_mapping"])
        except json.JSONDecodeError as exc:
            raise InputError(f"not JSON: {exc.msg}", source="query", field="options.label_mapping") from None
    try:
        options = BatchOptions.model_validate(values)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = ".".join(str(part) for part in error["loc"])
        raise InputError(
            str(error["msg"]).removeprefix("Value error, "), source="options", field=f"options.{loc}"
        ) from None
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
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON: {exc.msg} (column {exc.colno})", source="body", line=exc.lineno) from None
    except RecursionError:  # the C parser stops at Python's recursion limit (~100,000-deep bodies)
        raise InputError(_too_deep(settings), source="body") from None
    if not isinstance(data, dict):
        raise InputError("expected a JSON object", source="body")
    return data
