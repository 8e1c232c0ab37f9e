"""Batch options, declared once: `schemas.BatchOptions`. Everything that reads options as text derives from its fields.

The JSONL upload's query string, the web page's upload form and the CLI's flags all take their names, kinds, choices
and help from `BatchOptions.model_fields`, so a new option is one field in `schemas/` (plus its use). Each field is one
of three kinds, read from its annotation:

- a list (`metrics`, `prompt`): comma-separated in a query or form, a repeatable flag on the command line;
- a JSON object (`label_mapping`, `calibration`: a pydantic model): inline JSON, or on the command line a file;
- a scalar (`lang`, `samples` …): the text as given, converted by pydantic; a `Literal` gives the flag its choices.

An unknown key is refused naming it (422 / exit 2): a typo must never quietly grade with the default.
"""

from __future__ import annotations

import argparse
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from juiz.formats.encodable import NOT_TEXT, unencodable
from juiz.formats.readers import loads_strict
from juiz.runtime.errors import InputError
from schemas import BatchOptions

Kind = Literal["list", "json", "scalar"]
# Flag spellings kept from before the flags were derived (`--metric answer_relevance` repeated).
FLAG_ALIASES: dict[str, tuple[str, ...]] = {"metrics": ("--metric",)}
# `metric` is the single-metric field older API clients send; the CLI never had it (its --metric is `metrics`).
NOT_FLAGS = frozenset({"metric"})


@dataclass(frozen=True)
class OptionSpec:
    """What one field of BatchOptions is, as text: its name, kind, choices, scalar type and help."""

    name: str
    kind: Kind
    choices: tuple[str, ...] | None
    scalar: type | None
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def _members(annotation: Any) -> list[Any]:
    """The members of a union (`X | None` → [X]), or the annotation itself."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return [a for a in typing.get_args(annotation) if a is not type(None)]
    return [annotation]


def _literal_choices(annotation: Any) -> tuple[str, ...] | None:
    for member in _members(annotation):
        if typing.get_origin(member) is list:
            return _literal_choices(typing.get_args(member)[0])
        if typing.get_origin(member) is Literal:
            return tuple(str(a) for a in typing.get_args(member))
    return None


def _spec(name: str, field: FieldInfo) -> OptionSpec:
    members = _members(field.annotation)
    if any(isinstance(m, type) and issubclass(m, BaseModel) for m in members):
        kind: Kind = "json"
    elif any(typing.get_origin(m) is list for m in members):
        kind = "list"
    else:
        kind = "scalar"
    scalar = next((m for m in members if m in (int, float)), None)
    return OptionSpec(name, kind, _literal_choices(field.annotation), scalar, field.description or "")


OPTIONS: dict[str, OptionSpec] = {name: _spec(name, f) for name, f in BatchOptions.model_fields.items()}


def unknown_key(key: str, known: Iterable[str], *, source: str, field: str | None = None) -> InputError:
    return InputError(f"unknown option {key!r}; known: {', '.join(known)}", source=source, field=field or key)


def options_from_text(
    values: Mapping[str, str | Sequence[str]], *, source: str, prefix: str = "options."
) -> dict[str, Any]:
    """Options given as text (a query string, a form) → the dict `validate_options` reads. A value may be a list of
    texts (a repeated form field or query parameter): list options gather them all, others take the last."""
    options: dict[str, Any] = {}
    for name, raw in values.items():
        spec = OPTIONS.get(name)
        if spec is None:
            raise unknown_key(name, OPTIONS, source=source, field=prefix + name)
        texts = [raw] if isinstance(raw, str) else list(raw)
        if spec.kind == "list":
            parts = [p.strip() for text in texts for p in text.split(",") if p.strip()]
            # `prompt` is one id or several; metrics is always a list.
            options[name] = parts[0] if (name == "prompt" and len(parts) == 1) else parts
        elif spec.kind == "json":
            try:
                options[name] = loads_strict(texts[-1])
            except ValueError as exc:
                raise InputError(f"not JSON: {getattr(exc, 'msg', exc)}", source=source, field=prefix + name) from None
        else:
            options[name] = texts[-1]
    return options


def validate_options(raw: object, *, source: str = "options", prefix: str = "options") -> BatchOptions:
    """A JSON object of options → BatchOptions; InputError naming the field (an unknown key included)."""
    if not isinstance(raw, dict):
        kind = "null" if raw is None else type(raw).__name__
        raise InputError(f"expected a JSON object, got {kind}", source=source, field=prefix or None)
    if (where := unencodable(raw)) is not None:
        raise InputError(NOT_TEXT, source=source, field=".".join(p for p in (prefix, where) if p) or None)
    try:
        return BatchOptions.model_validate(raw)
    except ValidationError as exc:
        raise InputError.from_validation(exc, source=source, prefix=prefix) from None


def add_option_flags(parser: argparse.ArgumentParser, only: Iterable[str] | None = None) -> None:
    """One flag per option (default: every option but `metric`), help from the field's description. Flags default
    to None, so an absent flag leaves the option's own default in force."""
    for name in only if only is not None else (n for n in OPTIONS if n not in NOT_FLAGS):
        spec = OPTIONS[name]
        flags = [*FLAG_ALIASES.get(name, ()), spec.flag]
        kwargs: dict[str, Any] = {"dest": name, "default": None, "help": spec.help}
        if spec.kind == "list":
            kwargs.update(action="append", choices=spec.choices, help=f"{spec.help} (repeatable)")
        elif spec.kind == "json":
            kwargs.update(metavar="JSON_OR_FILE", help=f"{spec.help} (inline JSON or a file holding it)")
        else:
            kwargs.update(choices=spec.choices, type=spec.scalar or str)
        parser.add_argument(*flags, **kwargs)


def _json_or_file(value: str, flag: str) -> Any:
    text = value
    if not value.lstrip().startswith("{"):
        try:
            text = Path(value).read_text(encoding="utf-8")
        except OSError as exc:
            raise InputError(f"not inline JSON and not a readable file ({exc.strerror})", source=flag) from None
    try:
        return loads_strict(text)
    except ValueError as exc:
        raise InputError(f"not JSON: {getattr(exc, 'msg', exc)}", source=flag) from None


def options_from_args(args: argparse.Namespace) -> BatchOptions:
    """The flags `add_option_flags` declared → BatchOptions (exit 2 naming the flag's field when invalid)."""
    values: dict[str, Any] = {}
    for name, spec in OPTIONS.items():
        value = getattr(args, name, None)
        if value is None:
            continue
        if spec.kind == "json":
            value = _json_or_file(value, spec.flag)
        elif name == "prompt" and len(value) == 1:
            value = value[0]
        values[name] = value
    return validate_options(values, source="options", prefix="")


def json_option(name: str, value: str | None, flag: str | None = None) -> Any:
    """One JSON option from a flag (`--label-mapping` of `juiz agreement`), validated as the option's field."""
    field = BatchOptions.model_fields[name]
    annotation = next(m for m in _members(field.annotation) if isinstance(m, type) and issubclass(m, BaseModel))
    flag = flag or OPTIONS[name].flag
    if value is None:
        return field.get_default(call_default_factory=True)
    try:
        return annotation.model_validate(_json_or_file(value, flag))
    except ValidationError as exc:
        raise InputError.from_validation(exc, source=flag) from None
