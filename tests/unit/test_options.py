"""Options declared once (schemas.BatchOptions): the CLI's flags and the query/form reader derive from its fields,
and an unknown key anywhere in options or a label mapping is refused naming it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from juiz.cli import build_parser, main
from juiz.formats.options import OPTIONS, add_option_flags, options_from_args, options_from_text, validate_options
from juiz.runtime.errors import InputError
from schemas import BatchOptions


def test_every_option_has_a_flag_and_the_old_spellings_still_work() -> None:
    parser = argparse.ArgumentParser()
    add_option_flags(parser)
    flags = {s for action in parser._actions for s in action.option_strings}
    for name in OPTIONS:
        if name != "metric":
            assert "--" + name.replace("_", "-") in flags
    args = parser.parse_args(
        ["--metric", "answer_relevance", "--metric", "groundedness", "--mode", "cot", "--samples", "3"]
    )
    options = options_from_args(args)
    assert options.metrics == ["answer_relevance", "groundedness"] and options.samples == 3
    assert options.lang == "auto"  # an absent flag keeps the field's own default


def test_a_new_option_field_gets_a_flag_and_a_query_parameter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Adding a batch option is one field in schemas/: derive the specs from a subclass with one more field."""
    import juiz.formats.options as options_module

    class WithNewOption(BatchOptions):
        max_reasons: int = 3

    specs = {name: options_module._spec(name, f) for name, f in WithNewOption.model_fields.items()}
    monkeypatch.setattr(options_module, "OPTIONS", specs)
    parser = argparse.ArgumentParser()
    add_option_flags(parser)
    assert parser.parse_args(["--max-reasons", "5"]).max_reasons == 5
    assert options_from_text({"max_reasons": "5"}, source="query") == {"max_reasons": "5"}


def test_query_text_is_read_by_kind() -> None:
    raw = options_from_text(
        {
            "metrics": "answer_relevance, groundedness",
            "prompt": "answer_relevance@juiz-1",
            "label_mapping": '{"numeric_scale": "0-3"}',
            "samples": "2",
        },
        source="query",
    )
    options = validate_options(raw)
    assert options.metrics == ["answer_relevance", "groundedness"]
    assert options.prompt == "answer_relevance@juiz-1" and options.samples == 2
    assert options.label_mapping.numeric_scale == "0-3"


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"mdoe": "fast"}, "options.mdoe"),
        ({"label_mapping": {"metrc": "groundedness"}}, "options.label_mapping.metrc"),
        (
            {
                "label_mapping": {
                    "classes": [{"name": "N", "scores": [0, 1], "alias": ["no"]}, {"name": "Y", "scores": [2, 3]}]
                }
            },
            "options.label_mapping.classes.0.alias",
        ),
        (
            {"label_mapping": {"verdict": [{"label": "C", "when": {"answer_relevance": 3}, "iff": 1}]}},
            "options.label_mapping.verdict.0.iff",
        ),
    ],
)
def test_unknown_keys_are_named(raw: dict[str, object], field: str) -> None:
    with pytest.raises(InputError) as caught:
        validate_options(raw)
    assert caught.value.field == field and "unknown" in caught.value.message


def test_unknown_query_option_is_named() -> None:
    with pytest.raises(InputError) as caught:
        options_from_text({"temprature": "0.3"}, source="query")
    assert caught.value.field == "options.temprature" and "temperature" in caught.value.message


def test_null_options_are_refused() -> None:
    with pytest.raises(InputError) as caught:
        validate_options(None)
    assert caught.value.field == "options" and "null" in caught.value.message


def test_from_validation_names_the_deepest_union_member() -> None:
    class Model(BaseModel):
        context: str | list[dict[str, int]]

    with pytest.raises(ValidationError) as caught:
        Model.model_validate({"context": [{"a": "x"}]})
    error = InputError.from_validation(caught.value, source="body", line=3, prefix="item")
    assert error.field == "item.context.0.a" and error.line == 3 and error.source == "body"


def test_cli_label_mapping_typo_exits_2_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "out.jsonl"
    results.write_text("", encoding="utf-8")
    mapping = json.dumps({"metrc": "groundedness"})
    code = main(["agreement", str(results), "--label-mapping", mapping])
    err = capsys.readouterr().err
    assert code == 2 and "metrc" in err and "Traceback" not in err


def test_cli_score_label_mapping_typo_exits_2_before_any_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    items = tmp_path / "in.jsonl"
    items.write_text('{"question": "Q?", "answer": "A"}\n', encoding="utf-8")
    mapping = json.dumps({"tresholds": [0.5, 2.5]})
    code = main(["score", str(items), "-o", str(tmp_path / "o.jsonl"), "--label-mapping", mapping])
    err = capsys.readouterr().err
    assert code == 2 and "tresholds" in err and "loading" not in err


def test_cli_help_lists_every_option() -> None:
    text = build_parser()._subparsers._group_actions[0].choices["score"].format_help()  # type: ignore[union-attr]
    for flag in ("--metric", "--prompt", "--lang", "--mode", "--samples", "--temperature", "--calibration"):
        assert flag in text


def test_cli_refuses_labels_the_mapping_does_not_know_before_any_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    items = tmp_path / "in.jsonl"
    items.write_text(
        '{"id": "a", "question": "Q?", "answer": "A", "manual_label": "C"}\n'
        '{"id": "b", "question": "Q?", "answer": "A", "manual_label": "maybe"}\n',
        encoding="utf-8",
    )
    code = main(["score", str(items), "-o", str(tmp_path / "o.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and "item b" in err and "'maybe'" in err and "loading" not in err
