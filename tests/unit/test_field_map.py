"""--field-map: other tools' field names (RAGAS, common names, a user's own JSON) mapped to juiz's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from juiz.formats.readers import FieldMap, parse_triples_jsonl, read_triples
from juiz.runtime.errors import InputError

RAGAS_ROW = {
    "user_input": "What is mitosis?",
    "retrieved_contexts": ["Mitosis is cell division.", "Cells divide in phases."],
    "response": "Cell division into two identical cells.",
    "reference": "A type of cell division.",
}


def write(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_ragas_preset_maps_names_and_turns_retrieved_contexts_into_segments(tmp_path: Path) -> None:
    [triple] = read_triples(write(tmp_path / "r.jsonl", [RAGAS_ROW]), FieldMap.parse("ragas"))
    assert triple.question == "What is mitosis?"
    assert triple.answer == "Cell division into two identical cells."
    assert isinstance(triple.context, list)
    assert [s.text for s in triple.context] == RAGAS_ROW["retrieved_contexts"]
    assert triple.passthrough() == {"reference": "A type of cell division."}  # kept under its own name


def test_common_preset(tmp_path: Path) -> None:
    row = {"query": "q?", "contexts": ["c1"], "response": "a", "ground_truth": "g"}
    path = tmp_path / "c.json"
    path.write_text(json.dumps([row]), encoding="utf-8")
    [triple] = read_triples(path, FieldMap.parse("common"))
    assert (triple.question, triple.answer, triple.passthrough()) == ("q?", "a", {"reference": "g"})


def test_inline_json_map_and_a_file(tmp_path: Path) -> None:
    row = {"prompt": "q?", "completion": "a"}
    inline = FieldMap.parse('{"prompt": "question", "completion": "answer"}')
    mapfile = tmp_path / "map.json"
    mapfile.write_text('{"prompt": "question", "completion": "answer"}', encoding="utf-8")
    for field_map in (inline, FieldMap.parse(str(mapfile))):
        [triple] = parse_triples_jsonl(json.dumps(row), "body", field_map)
        assert (triple.question, triple.answer) == ("q?", "a")


def test_errors_name_the_line_and_the_field_as_the_user_wrote_it(tmp_path: Path) -> None:
    rows = [RAGAS_ROW, {k: v for k, v in RAGAS_ROW.items() if k != "response"}]
    with pytest.raises(InputError) as error:
        read_triples(write(tmp_path / "r.jsonl", rows), FieldMap.parse("ragas"))
    assert (error.value.line, error.value.field, error.value.message) == (2, "response", "required field is missing")
    bad_segment = {**RAGAS_ROW, "retrieved_contexts": ["ok", 3]}
    with pytest.raises(InputError) as error:
        read_triples(write(tmp_path / "s.jsonl", [bad_segment]), FieldMap.parse("ragas"))
    assert error.value.line == 1 and (error.value.field or "").startswith("retrieved_contexts.1")


def test_both_names_for_one_field_is_an_error() -> None:
    with pytest.raises(InputError, match="both 'user_input' and 'question'") as error:
        parse_triples_jsonl(json.dumps({**RAGAS_ROW, "question": "other?"}), "body", FieldMap.parse("ragas"))
    assert error.value.line == 1


def test_csv_with_a_map_checks_the_header_in_the_users_names(tmp_path: Path) -> None:
    good = tmp_path / "good.csv"
    good.write_text('user_input,response,retrieved_contexts\nq?,a,"[""c1"", ""c2""]"\n', encoding="utf-8")
    [triple] = read_triples(good, FieldMap.parse("ragas"))
    assert triple.question == "q?" and isinstance(triple.context, list) and triple.context[1].text == "c2"
    bad = tmp_path / "bad.csv"
    bad.write_text("user_input,answer_text\nq?,a\n", encoding="utf-8")
    with pytest.raises(InputError, match="no 'response' column") as error:
        read_triples(bad, FieldMap.parse("ragas"))
    assert error.value.field == "response"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("nosuchpreset", "not a preset"),
        ("{bad json", "malformed JSON"),
        ('{"a": 1}', "expected a preset name or a JSON object"),
        ('{"a": "question", "b": "question"}', "two fields are mapped to 'question'"),
    ],
)
def test_bad_maps_are_input_errors_naming_the_flag(value: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as error:
        FieldMap.parse(value)
    assert error.value.source == "--field-map"
