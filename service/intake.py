"""Read a batch submission from a request body: a JSON `{items, options}` object or a JSONL upload.

Everything is validated before anything is stored: limits first (413), then options and every item (422 naming the
item's index or line, and its field). Items are validated by the same code the CLI's readers use.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from juiz.errors import InputError
from juiz.judge import validate_options
from juiz.readers import (
    parse_triples_jsonl,
    validate_model,  # the readers' one validator: InputError naming the field
)
from schemas import BatchOptions, Triple
from service.errors import ITEMS_SOURCE, LimitExceeded

NDJSON = "application/x-ndjson"
JSONL_TYPES = (NDJSON, "application/jsonl", "application/x-jsonlines")
OPTION_FIELDS = ("metric", "prompt", "lang", "mode", "label_mapping")


@dataclass(frozen=True)
class Submission:
    items: list[Triple]
    options: BatchOptions
    fingerprint: str  # what "the same request body" means for Idempotency-Key


def is_jsonl(content_type: str) -> bool:
    return content_type.split(";")[0].strip().lower() in JSONL_TYPES


def read_submission(body: bytes, content_type: str, query: Mapping[str, str], max_items: int) -> Submission:
    """Parse and validate a POST /v1/batches body. Options come from the body (JSON) or the query (JSONL)."""
    text = _text(body)
    if is_jsonl(content_type):
        count = sum(1 for line in text.split("\n") if line.strip())
        if count > max_items:
            raise LimitExceeded("max_items", max_items, count)
        options = read_options({k: v for k, v in query.items() if k in OPTION_FIELDS}, from_query=True)
        items = parse_triples_jsonl(text, "body")
    else:
        data = _json_object(text)
        unknown = sorted(set(data) - {"items", "options"})
        if unknown:
            raise InputError("unknown field (expected 'items' and 'options')", source="body", field=unknown[0])
        raw_items = data.get("items")
        if not isinstance(raw_items, list):
            raise InputError("required: a JSON array of triples", source="body", field="items")
        if len(raw_items) > max_items:
            raise LimitExceeded("max_items", max_items, len(raw_items))
        if not raw_items:
            raise InputError("no items", source="body", field="items")
        options = read_options(data.get("options") or {})
        items = [validate_model(Triple, obj, ITEMS_SOURCE, index) for index, obj in enumerate(raw_items)]
    canonical_options = options.model_dump_json()
    fingerprint = hashlib.sha256(content_type.encode() + b"\0" + body + b"\0" + canonical_options.encode()).hexdigest()
    return Submission(items=items, options=options, fingerprint=fingerprint)


def read_grade_request(body: bytes) -> tuple[Triple, BatchOptions]:
    """POST /v1/grade: `{"item": {...}, "options": {...}}`."""
    data = _json_object(_text(body))
    unknown = sorted(set(data) - {"item", "options"})
    if unknown:
        raise InputError("unknown field (expected 'item' and 'options')", source="body", field=unknown[0])
    if "item" not in data:
        raise InputError("required field is missing", source="body", field="item")
    options = read_options(data.get("options") or {})
    try:
        triple = validate_model(Triple, data["item"], "item", None)
    except InputError as exc:
        raise InputError(exc.message, source="body", field=f"item.{exc.field}" if exc.field else "item") from None
    return triple, options


def read_options(raw: Any, *, from_query: bool = False) -> BatchOptions:
    """Validate options; a prompt id that does not exist is a PromptError (422 on options.prompt)."""
    if not isinstance(raw, dict):
        raise InputError("expected a JSON object", source="body", field="options")
    values = dict(raw)
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


def _json_object(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON: {exc.msg} (column {exc.colno})", source="body", line=exc.lineno) from None
    if not isinstance(data, dict):
        raise InputError("expected a JSON object", source="body")
    return data
