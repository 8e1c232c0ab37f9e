"""Read request bodies: typed JSON bodies (`data: Model`) and the batch submission, JSON or a JSONL upload.

Every JSON body a handler takes as `data` is read by `JsonRequest`, the app's request class: the media type (415),
then juiz's strict JSON reader (no NaN, Infinity or 1e400; too deep is a 422), before Litestar validates it into the
handler's model (`service.errors.validation_failed` answers its refusals 422, naming the field).

A batch is validated whole before anything is stored: limits (413), nesting depth, options and every item, and each
item's field lengths (422 naming the item's index or line, and its field). Items are validated by the same code the
CLI's readers use.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from litestar import Request
from litestar.exceptions import HTTPException
from litestar.openapi.spec import OpenAPIMediaType, OpenAPIType, Reference, RequestBody, Schema
from pydantic import TypeAdapter, ValidationError, model_validator

from juiz.agreement.labels import check_labels
from juiz.formats.encodable import NOT_TEXT, unencodable
from juiz.formats.options import OPTIONS, loads_strict, options_from_text
from juiz.formats.options import validate_options as validate_option_fields
from juiz.formats.readers import (
    FieldMap,
    count_values,
    parse_triples_jsonl,
    validate_triple,  # the readers' one validator: InputError naming the field (as the user wrote it)
)
from juiz.judging.judge import context_segments
from juiz.judging.plan import validate_options
from juiz.runtime.errors import InputError
from juiz.runtime.settings import Settings
from schemas import BatchName, BatchOptions, BatchSubmission, GradeRequest, Triple
from schemas.labelsets import LabelledItem
from service.errors import ITEMS_SOURCE, LimitExceeded, body_error

NDJSON = "application/x-ndjson"
JSON = "application/json"
JSONL_TYPES = (NDJSON, "application/jsonl", "application/x-jsonlines")
# A route handler's `opt` key: it reads a JSONL upload itself (its typed `data` is None then).
READS_JSONL = "reads_jsonl"
# The JSONL upload's query parameters: every option (juiz.formats.options derives them from BatchOptions), field_map
# and the batch's name (both fields of schemas.BatchSubmission beside its items and options).
QUERY_PARAMETERS = (*OPTIONS, "field_map", "name")
_NAME = TypeAdapter(BatchName)
LENGTH_SETTINGS = {
    "question": "max_question_chars",
    "answer": "max_answer_chars",
    "context": "max_context_chars",
    "extra": "max_extra_chars",
}


def document_jsonl_upload(body: RequestBody, line: str) -> None:
    """In the OpenAPI document of a route that reads a JSONL upload itself (READS_JSONL): the JSONL media type beside
    the JSON body Litestar documented from the handler's `data: Model | None`, each line one `line` as JSON."""
    body.required = True  # `data` is None only for the JSONL upload, which is a body too
    content = body.content
    if JSON not in content and content:
        content[JSON] = next(iter(content.values()))
    schema = content[JSON].schema
    if isinstance(schema, Schema) and schema.one_of:  # `| None`: only the JSONL upload leaves `data` None
        content[JSON].schema = next(s for s in schema.one_of if isinstance(s, Reference))
    content[NDJSON] = OpenAPIMediaType(
        schema=Schema(type=OpenAPIType.STRING, description=f"one {line} as JSON per line")
    )


@dataclass(frozen=True)
class Submission:
    items: list[Triple]
    options: BatchOptions
    fingerprint: str  # what "the same request body" means for Idempotency-Key
    name: str | None = None


class JsonRequest(Request[Any, Any, Any]):
    """The app's request class: what Litestar validates into a handler's typed `data` is read here."""

    async def json(self) -> Any:
        content_type = self.headers.get("content-type")
        jsonl = bool(self.route_handler.opt.get(READS_JSONL))
        if jsonl and content_type is not None and is_jsonl(content_type):
            return None  # not one JSON document: the handler reads the upload line by line (errors name the line)
        require_media_type(content_type, (JSON, *JSONL_TYPES) if jsonl else (JSON,))
        body = await self.body()
        check_values(body, self.app.state.settings)
        return _json_object(_text(body), self.app.state.settings)


class BatchSubmissionBody(BatchSubmission):
    """POST /v1/batches' typed body: BatchSubmission, its items read through its `field_map` before they are
    validated, so a caller's own field names are accepted and errors name the field as the caller wrote it."""

    # Litestar names the OpenAPI component after the class's qualified name: the contract's.
    __qualname__ = "BatchSubmission"

    @model_validator(mode="before")
    @classmethod
    def _items_through_field_map(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("items"), list):
            return data  # pydantic names what is wrong with the body itself
        if (where := unencodable({k: v for k, v in data.items() if k != "items"})) is not None:
            raise InputError(NOT_TEXT, source="body", field=where or None)  # options, name, field_map; items below
        field_map = read_field_map(data.get("field_map"))
        items = [validate_triple(obj, ITEMS_SOURCE, index, field_map) for index, obj in enumerate(data["items"])]
        return {**data, "items": items}


class GradeRequestBody(GradeRequest):
    """POST /v1/grade's typed body: GradeRequest, its item read through its `field_map` (as BatchSubmissionBody's)."""

    __qualname__ = "GradeRequest"

    @model_validator(mode="before")
    @classmethod
    def _item_through_field_map(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "item" not in data:
            return data
        if (where := unencodable({k: v for k, v in data.items() if k != "item"})) is not None:
            raise InputError(NOT_TEXT, source="body", field=where or None)
        field_map = read_field_map(data.get("field_map"))
        try:
            item = validate_triple(data["item"], "item", None, field_map)
        except InputError as exc:
            raise InputError(exc.message, source="body", field=f"item.{exc.field}" if exc.field else "item") from None
        return {**data, "item": item}


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
    """A POST /v1/batches body read whole (the web page's upload, as JSON): JSON `{items, options}` or JSONL."""
    require_media_type(content_type, (JSON, *JSONL_TYPES))
    if content_type is not None and is_jsonl(content_type):
        return read_jsonl_submission(body, content_type, query, settings)
    check_values(body, settings)
    try:
        data = BatchSubmissionBody.model_validate(_json_object(_text(body), settings))
    except ValidationError as exc:
        raise body_error(exc) from None
    return accept_submission(data, body, content_type or JSON, query, settings)


def read_jsonl_submission(
    body: bytes, content_type: str, query: Mapping[str, str | list[str]], settings: Settings
) -> Submission:
    """A JSONL upload: one triple a line, options in the query (a query parameter that is not an option is a 422
    naming it)."""
    _refuse_unknown_query(query, jsonl=True)
    max_items = settings.max_items
    check_values(body, settings)
    text = _text(body)
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
    _check_conversations(items, options, settings)
    fingerprint = _fingerprint(content_type, body, options, batch_name)
    return Submission(items=items, options=options, fingerprint=fingerprint, name=batch_name)


def accept_submission(
    data: BatchSubmission, body: bytes, content_type: str, query: Mapping[str, str | list[str]], settings: Settings
) -> Submission:
    """A JSON submission pydantic has validated, checked against this deployment: no query parameters (a JSON body
    carries its options), limits, the prompt, each item's depth and lengths, labels."""
    _refuse_unknown_query(query, jsonl=False)
    if len(data.items) > settings.max_items:
        raise LimitExceeded("max_items", settings.max_items, len(data.items))
    validate_options(data.options)
    for index, item in enumerate(data.items):
        _check_item(item, settings, ITEMS_SOURCE, index)
    _check_labels(data.items, data.options, source=ITEMS_SOURCE, lines=None)
    _check_conversations(data.items, data.options, settings)
    name = data.name or None  # a blank name is no name
    fingerprint = _fingerprint(content_type, body, data.options, name)
    return Submission(items=data.items, options=data.options, fingerprint=fingerprint, name=name)


def accept_triples(items: list[Triple], options: BatchOptions, name: str | None, settings: Settings) -> Submission:
    """Triples juiz already holds (a labelled set's), checked against this deployment as a submission's are: limits,
    the options, each item's depth and lengths, labels."""
    if len(items) > settings.max_items:
        raise LimitExceeded("max_items", settings.max_items, len(items))
    validate_options(options)
    for index, item in enumerate(items):
        _check_item(item, settings, ITEMS_SOURCE, index)
    _check_labels(items, options, source=ITEMS_SOURCE, lines=None)
    _check_conversations(items, options, settings)
    body = "\n".join(item.model_dump_json() for item in items).encode()
    return Submission(items=items, options=options, fingerprint=_fingerprint(JSON, body, options, name), name=name)


def read_labelled_jsonl(body: bytes, settings: Settings) -> list[LabelledItem]:
    """A labelled set's JSONL upload: one LabelledItem a line (blank lines skipped); InputError naming the line and
    field of the first that isn't one. 413 over max_items lines."""
    check_values(body, settings)
    numbered = [(n, line) for n, line in enumerate(_text(body).split("\n"), start=1) if line.strip()]
    if len(numbered) > settings.max_items:
        raise LimitExceeded("max_items", settings.max_items, len(numbered))
    items = []
    for number, line in numbered:
        try:
            data = _json_object(line, settings)
            items.append(LabelledItem.model_validate(data))
        except InputError as exc:
            raise InputError(exc.message, source="body", line=number, field=exc.field) from None
        except ValidationError as exc:
            raise InputError.from_validation(exc, source="body", line=number) from None
    return items


def check_set_items(items: list[Triple], settings: Settings, *, source: str = ITEMS_SOURCE) -> None:
    """Items about to join a labelled set: each one's depth and lengths, as a submission's (InputError naming the
    item's index and field)."""
    for index, item in enumerate(items):
        _check_item(item, settings, source, index)


def accept_grade_request(data: GradeRequest, settings: Settings) -> tuple[Triple, BatchOptions]:
    """POST /v1/grade's validated body, checked as a submission's item is."""
    validate_options(data.options)
    try:
        _check_item(data.item, settings, "item", None)
        _check_labels([data.item], data.options, source="item", lines=None)
    except InputError as exc:
        raise InputError(exc.message, source="body", field=f"item.{exc.field}" if exc.field else "item") from None
    return data.item, data.options


def _refuse_unknown_query(query: Mapping[str, object], *, jsonl: bool) -> None:
    for name in query:
        if name not in QUERY_PARAMETERS or not jsonl:
            where = "known: " + ", ".join(QUERY_PARAMETERS) if jsonl else "a JSON body carries its options in the body"
            raise InputError(f"unknown query parameter ({where})", source="query", field=name)


def _fingerprint(content_type: str, body: bytes, options: BatchOptions, name: str | None) -> str:
    canonical = options.model_dump_json() + "\0" + (name or "")  # the same key with another name is another body
    return hashlib.sha256(content_type.encode() + b"\0" + body + b"\0" + canonical.encode()).hexdigest()


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


def read_field_map(raw: object, source: str = "body") -> FieldMap | None:
    """`field_map`: a preset name (ragas, common) or a JSON object {their_name: juiz_name}; never a file path."""
    return FieldMap.parse(raw, source=source, files=False, field="field_map")


def _check_item(item: Triple, settings: Settings, source: str, index: int | None) -> None:
    """A validated item's passed-through fields nested no deeper than max_json_depth (naming the field; a segment's
    under `context`), then its field lengths. Its own fields are typed: only passed-through ones can nest."""
    for name, value in (item.model_extra or {}).items():
        _check_depth(value, settings, source=source, line=index, field=name)
    if isinstance(item.context, list):  # the segments' own fields, counted from the context's list
        segments = [segment.model_extra for segment in item.context]
        _check_depth(segments, settings, source=source, line=index, field="context")
    _check_lengths(item, settings, source=source, line=index)


def _check_labels(items: list[Triple], options: BatchOptions, *, source: str, lines: list[int] | None) -> None:
    """juiz.agreement.labels.check_labels, naming the item by its index (JSON) or line (JSONL)."""
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


def check_values(body: bytes, settings: Settings) -> None:
    """413 naming max_json_values when the body holds more values than it allows, before it is parsed."""
    limit = settings.max_json_values
    if len(body) // 2 > limit and (count := count_values(body)) > limit:  # a value takes 2 bytes at least
        raise LimitExceeded("max_json_values", limit, count, what="JSON values")


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
