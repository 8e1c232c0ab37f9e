"""juiz.formats.report: the seeds' markdown layout, and a rendered report reads back through juiz.formats.readers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from juiz.formats.readers import read_triples
from juiz.formats.report import render_report, write_report
from schemas.judgement import Judgement, JudgementStatus, Provenance
from schemas.triple import Segment, Triple

PROVENANCE = Provenance(
    model="fake", prompt="answer_relevance@juiz-1.pt", prompt_sha256="0" * 64, sampling={}, juiz_version="test"
)
SEGMENTS = [
    Segment(
        text="O TensorFlow prioriza GPU.", source="6844", start="00:01:50", end="00:03:59", score=0.8682695031166077
    ),
    Segment.model_validate({"text": "Casting só ocorre\nem CPU.", "source": "6845", "score": 0.86, "url": "oculto"}),
    Segment(text="Sem metadados."),
]


def judgement(status: JudgementStatus = JudgementStatus.OK, **fields: object) -> Judgement:
    base: dict[str, object] = {
        "id": "a",
        "status": status,
        "provenance": PROVENANCE,
        "question": "O TensorFlow prioriza a execução em qual dispositivo?",
        "answer": "Na GPU.\n\nMesmo com **CPUs** livres.",
        "context": SEGMENTS,
        "manual_label": "C",
    }
    if status is JudgementStatus.OK:
        base |= {
            "score": 2,
            "normalized_score": 2 / 3,
            "criteria": "A resposta deve tratar do dispositivo.",
            "supporting_evidence": "Diz GPU, mas sem justificar.",
            "automated_label": "P",
            "raw_output": "Criteria: ...",
        }
    return Judgement.model_validate(base | fields)


def round_trip(tmp_path: Path, judgements: list[Judgement]) -> list[Triple]:
    path = tmp_path / "report.md"
    write_report(judgements, path)
    return read_triples(path)


def assert_same_item(triple: Triple, original: Judgement) -> None:
    assert triple.question == original.question
    assert triple.answer == original.answer
    assert triple.manual_label == original.manual_label
    assert triple.context == original.context


def test_ok_judgement_round_trips(tmp_path: Path) -> None:
    original = judgement()
    rendered = render_report([original])
    assert "**Answer Relevance (AR)**: 0.67\n" in rendered
    assert "**Anotação automatizada**: P\n" in rendered
    assert (
        "**Raciocínio (AR CoT)**: Criteria: A resposta deve tratar do dispositivo. "
        "Supporting Evidence: Diz GPU, mas sem justificar. Score: 2\n"
    ) in rendered
    assert rendered.startswith("**Pergunta 1**: O TensorFlow")
    assert rendered.endswith("\n\n\n---\n")

    [triple] = round_trip(tmp_path, [original])
    assert_same_item(triple, original)
    extra = triple.passthrough()
    assert original.normalized_score is not None
    assert extra["reported_answer_relevance"] == round(original.normalized_score, 2)
    assert extra["reported_automated_label"] == "P"
    assert extra["reported_reasoning"] == (
        "Criteria: A resposta deve tratar do dispositivo. Supporting Evidence: Diz GPU, mas sem justificar. Score: 2"
    )


def test_parse_error_round_trips_with_raw_output(tmp_path: Path) -> None:
    raw = "Acho que a nota é boa.\n---\nTalvez 2?"  # the judge's own markdown rule must survive
    original = judgement(JudgementStatus.PARSE_ERROR, raw_output=raw, error="no Score line")
    rendered = render_report([original])
    assert "**Answer Relevance (AR)**: n/a (parse_error)\n" in rendered
    assert "**Anotação automatizada**: n/a\n" in rendered

    [triple] = round_trip(tmp_path, [original])
    assert_same_item(triple, original)
    extra = triple.passthrough()
    assert "reported_answer_relevance" not in extra
    assert "reported_automated_label" not in extra
    assert extra["reported_status"] == "parse_error"
    assert extra["reported_reasoning"] == raw


def test_failed_round_trips_with_error_and_question_numbers(tmp_path: Path) -> None:
    failed = judgement(JudgementStatus.FAILED, error="input too long: 9000 tokens", manual_label=3, context=None)
    plain = judgement(context="Contexto como texto simples.", question_number=43, references=["- [Vídeo]()", "url"])
    rendered = render_report([failed, plain])
    assert "**Segmentos recuperados**:\n(sem contexto)\n" in rendered  # no retriever named where there was none
    assert "**Answer Relevance (AR)**: n/a (failed)\n" in rendered
    assert "**Referências**:\n- [Vídeo]()\n- url\n" in rendered
    assert rendered.count("**Referências**") == 1  # no references, no heading

    first, second = round_trip(tmp_path, [failed, plain])
    assert first.id == "q1" and second.id == "q43"
    assert_same_item(first, failed)
    assert first.passthrough()["reported_reasoning"] == "input too long: 9000 tokens"
    assert first.passthrough()["reported_status"] == "failed"
    assert second.context == [Segment(text="Contexto como texto simples.")]
    assert second.passthrough()["references"] == ["- [Vídeo]()", "- url"]


@pytest.mark.parametrize("normalized", [0.0, 1 / 3, 0.5, 1.0])
def test_answer_relevance_has_two_decimals(normalized: float) -> None:
    rendered = render_report([judgement(normalized_score=normalized)])
    assert f"**Answer Relevance (AR)**: {normalized:.2f}\n" in rendered


def judgement_from_seed(triple: Triple) -> Judgement:
    """What a judge that agreed with the seed would have returned, built from the report's own fields."""
    extra = triple.passthrough()
    reasoning = str(extra["reported_reasoning"])
    match = re.fullmatch(r"Criteria: (.*) Supporting Evidence: (.*) Score: (\d)", reasoning, re.DOTALL)
    assert match is not None
    return Judgement.model_validate(
        {
            **extra,
            "id": triple.id,
            "status": "ok",
            "score": int(match[3]),
            "normalized_score": extra["reported_answer_relevance"],
            "criteria": match[1],
            "supporting_evidence": match[2],
            "automated_label": extra["reported_automated_label"],
            "manual_label": triple.manual_label,
            "provenance": PROVENANCE,
            "question": triple.question,
            "answer": triple.answer,
            "context": triple.context,
        }
    )


def test_seeds_rerender_to_their_original_text(seeds_dir: Path) -> None:
    for path in sorted(seeds_dir.glob("*.txt")):
        [triple] = read_triples(path)
        rendered = render_report([judgement_from_seed(triple)])
        original = path.read_text(encoding="utf-8")
        # Only trailing whitespace differs (seed 002's question ends with a space).
        assert [line.rstrip() for line in rendered.split("\n")] == [line.rstrip() for line in original.split("\n")]
        for key_line in (1, 3, 4, 5, 9, 75, 83, 85):
            assert rendered.split("\n")[key_line - 1].rstrip() == original.split("\n")[key_line - 1].rstrip()


def test_several_seeds_in_one_report_read_back(seeds_dir: Path, tmp_path: Path) -> None:
    triples = [read_triples(path)[0] for path in sorted(seeds_dir.glob("*.txt"))]
    again = round_trip(tmp_path, [judgement_from_seed(t) for t in triples])
    assert again == triples


ENGLISH = Provenance(
    model="fake", prompt="answer_relevance@juiz-1.en", prompt_sha256="0" * 64, sampling={}, juiz_version="test"
)


def english(**fields: object) -> Judgement:
    base: dict[str, object] = {
        "provenance": ENGLISH,
        "question": "Which device does TensorFlow prefer?",
        "answer": "The GPU.",
        "criteria": "The answer must name the device.",
        "supporting_evidence": "It says GPU.",
    }
    return judgement(**(base | fields))


def test_an_english_batch_gets_english_headings_from_the_same_layout(tmp_path: Path) -> None:
    original = english(question_number=7, references=["- [Video]()"])
    rendered = render_report([original])
    assert rendered == (
        "**Question 7**: Which device does TensorFlow prefer?\n\n"
        "**Segments retrieved by E5**:\n"
        "- *Corpus ID:* 6844\n- *Score:* 0.8682695031166077\n- *Start:* 00:01:50\n- *End:* 00:03:59\n"
        "- *Transcript:* O TensorFlow prioriza GPU.\n\n"
        "- *Corpus ID:* 6845\n- *Score:* 0.86\n- *URL:* oculto\n- *Transcript:* Casting só ocorre\nem CPU.\n\n"
        "- *Transcript:* Sem metadados.\n\n\n"
        "**Answer generated by the LLM**: The GPU.\n\n"
        "**References**:\n- [Video]()\n\n"
        "**Manual label**: C\n\n"
        "**Answer Relevance (AR)**: 0.67\n\n"
        "**Automated label**: P\n\n"
        "**Reasoning (AR CoT)**: Criteria: The answer must name the device. Supporting Evidence: It says GPU. "
        "Score: 2\n\n\n---\n"
    )
    assert "Pergunta" not in render_report([english(context=None)]) and "(no context)" in render_report(
        [english(context=None)]
    )
    # It reads back as the Portuguese one does.
    [triple] = round_trip(tmp_path, [original])
    assert_same_item(triple, original)
    assert triple.id == "q7" and triple.passthrough()["reported_automated_label"] == "P"
    assert triple.passthrough()["reported_reasoning"].startswith("Criteria: The answer must name the device.")
    [no_context] = round_trip(tmp_path, [english(context=None)])
    assert no_context.context is None


def test_the_batchs_language_option_decides_and_auto_follows_the_items(seeds_dir: Path) -> None:
    portuguese, english_item = judgement(), english()
    assert render_report([english_item], lang="pt").startswith("**Pergunta 1**: Which device")
    assert render_report([portuguese], lang="en").startswith("**Question 1**: O TensorFlow")
    # auto: the language most items were graded in (their prompts' language); an even split keeps Portuguese.
    assert render_report([english_item, english_item, portuguese]).startswith("**Question 1**")
    assert render_report([english_item, portuguese, portuguese]).startswith("**Pergunta 1**")
    assert render_report([english_item, portuguese]).startswith("**Pergunta 1**")
    # A prompt id without a language (an older result): the question's language.
    unpinned = ENGLISH.model_copy(update={"prompt": "answer_relevance@juiz-1"})
    assert render_report([english(provenance=unpinned)]).startswith("**Question 1**")
    assert render_report([judgement(provenance=unpinned)]).startswith("**Pergunta 1**")
    # A Portuguese batch is exactly the seeds' format, whatever language its judge's prompt was in.
    for path in sorted(seeds_dir.glob("*.txt")):
        seed = judgement_from_seed(read_triples(path)[0]).model_copy(update={"provenance": ENGLISH})
        rendered = render_report([seed], lang="pt")
        original = path.read_text(encoding="utf-8")
        assert [line.rstrip() for line in rendered.split("\n")] == [line.rstrip() for line in original.split("\n")]


def test_a_report_is_read_in_the_language_of_its_first_question_heading(tmp_path: Path) -> None:
    # The other language's question heading inside an answer is the answer's text, not a new item.
    pt = "**Pergunta 1**: Q?\n\n**Resposta gerada pelo LLM**: A\n**Question 2**: not an item\n\n---\n"
    en = "**Question 1**: Q?\n\n**Answer generated by the LLM**: A\n**Pergunta 2**: not an item\n\n---\n"
    for name, text in (("pt.md", pt), ("en.md", en)):
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        [triple] = read_triples(path)
        assert triple.question == "Q?" and triple.answer.endswith("2**: not an item"), name


def test_a_context_not_from_the_seeds_retriever_is_named_neutrally_and_read_back(tmp_path: Path) -> None:
    plain = english().model_copy(update={"context": "A passage of a PDF."})
    rendered = render_report([plain])
    assert "**Retrieved segments**:\n- *Text:* A passage of a PDF." in rendered
    assert "E5" not in rendered and "Transcript" not in rendered
    path = tmp_path / "report.txt"
    path.write_text(rendered, encoding="utf-8")
    (back,) = read_triples(path)
    assert [s.text for s in back.context] == ["A passage of a PDF."]  # type: ignore[union-attr]
