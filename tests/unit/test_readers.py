"""juiz.formats.readers: every input format, the seeds' reports, and errors that name file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from juiz.formats.readers import parse_triples_jsonl, read_judgements, read_triples, write_judgements
from juiz.runtime.errors import InputError
from schemas.judgement import Judgement, JudgementStatus, Provenance
from schemas.triple import Segment

SEGMENTS = [
    {"text": "O TensorFlow prioriza GPU.", "source": "6844", "start": "00:01:50", "end": "00:03:59", "score": 0.87},
    {"text": "Casting ocorre em CPU.", "source": "6845"},
]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(*objects: object) -> str:
    return "".join(json.dumps(obj, ensure_ascii=False) + "\n" for obj in objects)


# --- JSONL -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".jsonl", ".ndjson", ".JSONL"])
def test_jsonl_reads_objects_and_skips_blank_lines(tmp_path: Path, suffix: str) -> None:
    text = jsonl(
        {"id": 7, "question": "Onde?", "answer": "Na GPU.", "context": SEGMENTS, "manual_label": "C", "course": "cd"}
    )
    text += "\n   \n" + jsonl({"question": "Por quê?", "answer": "", "context": "texto"})
    triples = read_triples(write(tmp_path, f"in{suffix}", text))

    assert [t.question for t in triples] == ["Onde?", "Por quê?"]
    first, second = triples
    assert first.id == "7"
    assert first.manual_label == "C"
    assert first.passthrough() == {"course": "cd"}
    assert isinstance(first.context, list)
    assert first.context[0] == Segment(**SEGMENTS[0])
    assert first.context[1].source == "6845"
    assert second.context == "texto"
    assert second.id  # a default id is generated


def test_jsonl_accepts_byte_order_mark_and_crlf(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + jsonl({"question": "Q?", "answer": "A"}).replace("\n", "\r\n").encode())
    assert read_triples(path)[0].question == "Q?"


def test_jsonl_keeps_line_separator_characters_inside_strings(tmp_path: Path) -> None:
    # U+2028 is legal inside a JSON string; splitlines() would cut the line there.
    path = write(tmp_path, "in.jsonl", jsonl({"question": "a\u2028b", "answer": "c\u2029d"}))
    assert read_triples(path)[0].question == "a\u2028b"


def test_parse_triples_jsonl_names_the_source(tmp_path: Path) -> None:
    triples = parse_triples_jsonl(jsonl({"question": "Q?", "answer": "A"}), source="body")
    assert triples[0].answer == "A"
    with pytest.raises(InputError) as caught:
        parse_triples_jsonl(jsonl({"question": "Q?", "answer": "A"}) + "{oops\n", source="body")
    assert (caught.value.source, caught.value.line) == ("body", 2)
    with pytest.raises(InputError, match="no triples"):
        parse_triples_jsonl("\n\n", source="body")


# --- JSON --------------------------------------------------------------------------------------------------------


def test_json_array(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "in.json",
        json.dumps([{"id": "a", "question": "Q1?", "answer": "A1"}, {"question": "Q2?", "answer": "A2"}]),
    )
    assert [t.question for t in read_triples(path)] == ["Q1?", "Q2?"]


def test_json_object_with_items_such_as_a_saved_submission(tmp_path: Path) -> None:
    body = {"items": [{"question": "Q?", "answer": "A", "context": SEGMENTS}], "options": {"mode": "fast"}}
    [triple] = read_triples(write(tmp_path, "in.json", json.dumps(body, indent=2)))
    assert isinstance(triple.context, list) and len(triple.context) == 2


def test_json_error_names_the_item_index(tmp_path: Path) -> None:
    path = write(tmp_path, "in.json", json.dumps([{"question": "Q?", "answer": "A"}, {"answer": "A"}]))
    with pytest.raises(InputError) as caught:
        read_triples(path)
    assert (caught.value.line, caught.value.field) == (2, "question")


def test_malformed_json_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "in.json", '[\n  {"question": "Q?",\n   "answer": }\n]')
    with pytest.raises(InputError, match="malformed JSON") as caught:
        read_triples(path)
    assert caught.value.line == 3


@pytest.mark.parametrize("body", ['{"question": "Q?", "answer": "A"}', '{"items": {"question": "Q?"}}', '"text"'])
def test_json_that_is_no_list_of_triples(tmp_path: Path, body: str) -> None:
    with pytest.raises(InputError):
        read_triples(write(tmp_path, "in.json", body))


# --- CSV ---------------------------------------------------------------------------------------------------------


def test_csv_columns_extra_fields_and_json_context(tmp_path: Path) -> None:
    context_cell = json.dumps(SEGMENTS, ensure_ascii=False).replace('"', '""')
    text = (
        "id,question,answer,context,manual_label,course\n"
        f'1,Onde?,Na GPU.,"{context_cell}",C,cd\n'
        '2,"Por quê,\nde novo?",Porque sim.,texto simples,3,\n'
        "3,Quando?,Agora.,[1] uma citação,,\n"
    )
    first, second, third = read_triples(write(tmp_path, "in.csv", text))

    assert first.id == "1"
    assert isinstance(first.context, list)
    assert first.context[0] == Segment(**SEGMENTS[0])
    assert first.manual_label == "C"
    assert first.passthrough() == {"course": "cd"}
    assert second.question == "Por quê,\nde novo?"
    assert second.context == "texto simples"
    assert second.manual_label == 3  # numbers written as text read as numbers, as in JSON
    assert second.passthrough() == {}  # empty cells are absent, not ""
    assert third.context == "[1] uma citação"  # prose that merely starts with "[" stays text
    assert third.manual_label is None


def test_csv_error_names_the_row_line_after_a_multiline_cell(tmp_path: Path) -> None:
    text = 'question,answer,manual_label\n"Q1\nsegunda linha",A1,  \n\n"   ",A3,C\n'
    with pytest.raises(InputError) as caught:
        read_triples(write(tmp_path, "in.csv", text))
    assert (caught.value.line, caught.value.field) == (5, "question")
    assert "blank" in caught.value.message


def test_csv_header_without_question_column(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        read_triples(write(tmp_path, "in.csv", "pergunta,answer\nQ?,A\n"))
    assert (caught.value.line, caught.value.field) == (1, "question")


def test_csv_row_with_too_many_cells(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="3 cells") as caught:
        read_triples(write(tmp_path, "in.csv", "question,answer\nQ?,A\nQ?,A,x\n"))
    assert caught.value.line == 3


def test_csv_bad_segment_names_the_nested_field(tmp_path: Path) -> None:
    cell = json.dumps([{"text": "ok"}, {"source": "1"}]).replace('"', '""')
    with pytest.raises(InputError) as caught:
        read_triples(write(tmp_path, "in.csv", f'question,answer,context\nQ?,A,"{cell}"\n'))
    assert (caught.value.line, caught.value.field) == (2, "context.1.text")


# --- the seeds' reports ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("prefix", "number"), [("000", 43), ("001", 42), ("002", 19)])
def test_seed_reports(seeds_dir: Path, prefix: str, number: int) -> None:
    [path] = seeds_dir.glob(f"{prefix}_*.txt")
    [triple] = read_triples(path)
    extra = triple.passthrough()

    assert triple.id == f"q{number}"
    assert extra["question_number"] == number
    assert triple.question.endswith("?") and not triple.question.startswith("**")
    assert triple.answer.startswith("O ") and "**" not in triple.answer
    assert triple.manual_label == "C"
    assert isinstance(triple.context, list) and len(triple.context) == 10
    for segment in triple.context:
        assert segment.source is not None and segment.source.isdigit()
        assert segment.score is not None and 0.8 < segment.score < 1
        assert segment.start is not None and len(segment.start) == 8
        assert segment.end is not None and len(segment.end) == 8
        assert len(segment.text) > 100 and "*" not in segment.text
        assert (segment.model_extra or {})["url"] == "oculto"
    assert extra["reported_answer_relevance"] == 1.0
    assert extra["reported_automated_label"] == "C"
    reasoning = extra["reported_reasoning"]
    assert isinstance(reasoning, str) and reasoning.startswith("Criteria:") and reasoning.endswith("Score: 3")
    references = extra["references"]
    assert isinstance(references, list) and references and all(r.startswith("- [") for r in references)


def test_seed_values_are_exact(seeds_dir: Path) -> None:
    [triple] = read_triples(next(seeds_dir.glob("000_*.txt")))
    assert isinstance(triple.context, list)
    first = triple.context[0]
    assert (first.source, first.score, first.start, first.end) == ("7024", 0.8707904815673828, "00:18:08", "00:20:12")
    assert first.text.startswith("basicamente um arquivo csv")
    assert triple.context[-1].source == "6863"
    assert triple.answer == (
        "O TensorFlow prioriza a execução de operações em GPUs em relação a CPUs, mesmo que CPUs estejam disponíveis."
    )


def test_several_reports_in_one_file(seeds_dir: Path, tmp_path: Path) -> None:
    text = "\n".join(path.read_text(encoding="utf-8") for path in sorted(seeds_dir.glob("*.txt")))
    triples = read_triples(write(tmp_path, "all.md", text))
    assert [t.id for t in triples] == ["q43", "q42", "q19"]
    assert all(isinstance(t.context, list) and len(t.context) == 10 for t in triples)


def test_report_with_multiline_answer_and_missing_sections(tmp_path: Path) -> None:
    text = (
        "**Pergunta 5**: O que é um tensor?\n\n"
        "**Segmentos recuperados pelo E5**:\n(sem contexto)\n\n\n"
        "**Resposta gerada pelo LLM**: Um tensor é:\n\n- um vetor **multidimensional**;\n---\n"
        "**Nota**: texto em negrito que não é seção.\n\n"
        "**Anotação manual**: P\n\n---\n\n"
        "**Pergunta 6**: E um escalar?\n\n"
        "**Resposta gerada pelo LLM**: Um número.\n\n---\n"
    )
    first, second = read_triples(write(tmp_path, "r.md", text))
    assert first.id == "q5"
    assert first.context is None
    assert first.answer == (
        "Um tensor é:\n\n- um vetor **multidimensional**;\n---\n**Nota**: texto em negrito que não é seção."
    )
    assert first.manual_label == "P"
    assert "reported_answer_relevance" not in first.passthrough()
    assert "references" not in first.passthrough()
    assert second.id == "q6" and second.answer == "Um número." and second.manual_label is None


def test_report_segment_with_multiline_transcript(tmp_path: Path) -> None:
    text = (
        "**Pergunta 1**: Q?\n\n**Segmentos recuperados pelo E5**:\n"
        "- *Transcrição:* primeira linha\nsegunda linha\n\n"
        "- *Transcrição:* outro segmento\n\n\n"
        "**Resposta gerada pelo LLM**: A\n"
    )
    [triple] = read_triples(write(tmp_path, "r.txt", text))
    assert triple.context == [Segment(text="primeira linha\nsegunda linha"), Segment(text="outro segmento")]


def test_report_bad_segment_score_names_the_line(tmp_path: Path) -> None:
    text = "**Pergunta 1**: Q?\n\n**Segmentos recuperados pelo E5**:\n- *Score:* alto\n- *Transcrição:* t\n"
    with pytest.raises(InputError) as caught:
        read_triples(write(tmp_path, "r.md", text))
    assert (caught.value.line, caught.value.field) == (4, "context.0.score")


def test_report_blank_question(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        read_triples(write(tmp_path, "r.md", "intro\n\n**Pergunta 3**:   \n\n**Resposta gerada pelo LLM**: A\n"))
    assert (caught.value.line, caught.value.field) == (3, "question")


# --- errors common to all formats --------------------------------------------------------------------------------


def test_bad_json_line_is_named(tmp_path: Path) -> None:
    text = jsonl({"question": "Q?", "answer": "A"}) + "\n" + '{"question": "Q?", "answer": }\n'
    path = write(tmp_path, "in.jsonl", text)
    with pytest.raises(InputError, match="malformed JSON") as caught:
        read_triples(path)
    assert (caught.value.source, caught.value.line) == (str(path), 3)
    assert str(caught.value).startswith(f"{path}:3: ")


def test_missing_question_names_field_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "in.jsonl", jsonl({"question": "Q?", "answer": "A"}, {"answer": "A"}))
    with pytest.raises(InputError) as caught:
        read_triples(path)
    assert (caught.value.line, caught.value.field) == (2, "question")
    assert "missing" in caught.value.message


@pytest.mark.parametrize("question", ["", "   "])
def test_blank_question(tmp_path: Path, question: str) -> None:
    with pytest.raises(InputError) as caught:
        read_triples(write(tmp_path, "in.jsonl", jsonl({"question": question, "answer": "A"})))
    assert (caught.value.line, caught.value.field) == (1, "question")


def test_bad_segment_names_the_dotted_field(tmp_path: Path) -> None:
    context = [{"text": "a"}, {"text": "b"}, {"text": 3}]
    with pytest.raises(InputError) as caught:
        read_triples(write(tmp_path, "in.jsonl", jsonl({"question": "Q?", "answer": "A", "context": context})))
    assert caught.value.field == "context.2.text"


def test_line_that_is_not_an_object(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="expected a JSON object, got an array") as caught:
        read_triples(write(tmp_path, "in.jsonl", "[1, 2]\n"))
    assert caught.value.line == 1


def test_unknown_extension(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"unknown file type '\.xlsx'"):
        read_triples(write(tmp_path, "in.xlsx", "whatever"))


@pytest.mark.parametrize("name", ["in.jsonl", "in.json", "in.csv", "in.md", "in.txt"])
@pytest.mark.parametrize("text", ["", "\n  \n"])
def test_empty_file(tmp_path: Path, name: str, text: str) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(InputError, match="no triples") as caught:
        read_triples(path)
    assert caught.value.source == str(path)


def test_empty_json_array_and_header_only_csv(tmp_path: Path) -> None:
    for name, text in [("in.json", "[]"), ("in.csv", "question,answer\n")]:
        with pytest.raises(InputError, match="no triples"):
            read_triples(write(tmp_path, name, text))


def test_missing_file_and_non_utf8(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        read_triples(tmp_path / "absent.jsonl")
    path = tmp_path / "latin1.csv"
    path.write_bytes("question,answer\nOnde está?,Aqui\n".encode("latin-1"))
    with pytest.raises(InputError, match="not UTF-8"):
        read_triples(path)


# --- judgements --------------------------------------------------------------------------------------------------


def make_judgement(**fields: object) -> Judgement:
    base: dict[str, object] = {
        "id": "q1",
        "status": JudgementStatus.OK,
        "score": 2,
        "normalized_score": 2 / 3,
        "provenance": Provenance(
            model="fake", prompt="answer_relevance@juiz-1.pt", prompt_sha256="0" * 64, sampling={}, juiz_version="test"
        ),
        "question": "Onde?",
        "answer": "Na GPU\u2028ou não.",
        "context": [Segment(text="ação", source="1", score=0.5)],
    }
    return Judgement.model_validate(base | fields)


def test_judgements_round_trip(tmp_path: Path) -> None:
    judgements = [
        make_judgement(course="cd"),
        make_judgement(id="q2", status="failed", score=None, normalized_score=None, error="too long"),
    ]
    path = tmp_path / "out" / "results.jsonl"
    write_judgements(judgements, path)

    text = path.read_text(encoding="utf-8")
    assert text.count("\n") == 2 and "ação" in text  # one line each, not ASCII-escaped
    assert read_judgements(path) == judgements


def test_read_judgements_errors_and_empty(tmp_path: Path) -> None:
    assert read_judgements(write(tmp_path, "empty.jsonl", "")) == []
    good = make_judgement().model_dump(mode="json")
    bad = good | {"status": "maybe"}
    with pytest.raises(InputError) as caught:
        read_judgements(write(tmp_path, "r.jsonl", jsonl(good, bad)))
    assert (caught.value.line, caught.value.field) == (2, "status")


def test_a_folder_reads_every_known_file_in_name_order(tmp_path: Path) -> None:
    (tmp_path / "b.jsonl").write_text(json.dumps({"id": "b1", "question": "q", "answer": "a"}) + "\n")
    (tmp_path / "a.json").write_text(json.dumps([{"id": "a1", "question": "q", "answer": "a"}]))
    (tmp_path / "notes.log").write_text("not triples")
    assert [t.id for t in read_triples(tmp_path)] == ["a1", "b1"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="no file with a known extension"):
        read_triples(empty)


def test_a_body_s_values_are_counted_on_its_bytes_outside_strings() -> None:
    from juiz.formats.readers import count_values

    assert count_values(b'{"a":[1,2,"x,{[\\""],"b":{}}') == 6  # commas, braces and brackets in strings don't count
    assert count_values(b'{"a":"\\\\","b":[1]}') == 3  # an escaped backslash doesn't escape the closing quote
    tiny = b'{"items":[' + b",".join([b'{"text":"a"}'] * 100_000) + b"]}"
    assert count_values(tiny) == 2 + 100_000 + 99_999
