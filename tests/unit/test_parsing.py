"""The parser, tested by a table of real judge outputs (the seeds' reasoning among them) and nasty ones."""

from __future__ import annotations

import math
import re

import pytest

from juiz.formats.readers import read_triples
from juiz.judging.parsing import (
    COT_MAX_TOKENS,
    COT_REPLY_REGEX,
    CRITERIA_MAX_CHARS,
    EVIDENCE_MAX_CHARS,
    expected_score,
    parse_reply,
)

# (reply, expected score or None)
TABLE = [
    # juiz's own format, as the grammar makes the model write it
    ("Criteria: Name the capital.\nSupporting Evidence: It names Canberra.\nScore: 3", 3),
    ("Criteria: x\nSupporting Evidence: the answer is off-topic.\nScore: 0", 0),
    # seeds' style: all on one line, two spaces before Score
    ("Criteria: A resposta deve ser relevante. Supporting Evidence: Aborda diretamente.  Score: 3", 3),
    # a trailing explanation must not change the score
    ("Criteria: c\nSupporting Evidence: e\nScore: 3 (on a 0–3 scale)", 3),
    ("Criteria: c\nSupporting Evidence: e\nScore: 2/3", 2),
    # the smallest number in the text is not the score
    ("Criteria: 0 of 1 parts\nSupporting Evidence: mentions 1 item out of 0\nScore: 2", 2),
    # markdown-decorated labels from chatty models
    ("**Criteria:** c\n**Supporting Evidence:** e\n**Score:** 1", 1),
    ("criteria: c\nsupporting evidence: e\nscore: 1", 1),
    # a quoted "Score: 3" in the evidence is not the final score
    ('Criteria: c\nSupporting Evidence: the answer says "Score: 3" to game the grader\nScore: 0', 0),
    # fast mode: a bare digit
    ("2", 2),
    (" 3\n", 3),
    # not parseable → None, never a silent 0 or -1
    ("Criteria: c\nSupporting Evidence: e\nScore: ", None),
    ("Criteria: c\nSupporting Evidence: e\nScore: 4", None),
    ("Criteria: c\nSupporting Evidence: e\nScore: 10", None),
    ("Criteria: c\nSupporting Evidence: e\nScore: 2.5", None),
    ("Criteria: c\nSupporting Evidence: e\nScore: high", None),
    ("Criteria: c\nSupporting Evidence: the reply was cut before", None),
    ("", None),
    ("The answer is relevant. 3", None),
]


@pytest.mark.parametrize(("reply", "score"), TABLE)
def test_score_comes_from_the_last_score_label_only(reply: str, score: int | None) -> None:
    parsed = parse_reply(reply)
    assert parsed.score == score
    assert parsed.ok is (score is not None)
    if score is None:
        assert parsed.error


def test_free_text_parts_are_split() -> None:
    parsed = parse_reply("Criteria: what it must say\nSupporting Evidence: what it said\nScore: 2")
    assert parsed.criteria == "what it must say"
    assert parsed.supporting_evidence == "what it said"


def test_seeds_reasoning_parses_to_their_reported_score(seeds_dir) -> None:  # type: ignore[no-untyped-def]
    triples = [t for path in sorted(seeds_dir.glob("00*.txt")) for t in read_triples(path)]
    assert len(triples) == 3
    for triple in triples:
        extra = triple.passthrough()
        parsed = parse_reply(str(extra["reported_reasoning"]))
        assert parsed.score is not None
        assert parsed.score / 3 == pytest.approx(float(extra["reported_answer_relevance"]), abs=0.005)
        assert parsed.criteria  # Portuguese in some seeds, English in others
        assert parsed.supporting_evidence


def test_reply_regex_accepts_the_template_and_bounds_free_text() -> None:
    pattern = re.compile(COT_REPLY_REGEX)
    assert pattern.fullmatch("Criteria: c\nSupporting Evidence: e\nScore: 3")
    assert not pattern.fullmatch("Criteria: c\nSupporting Evidence: e\nScore: 4")
    assert not pattern.fullmatch("Criteria: c\nSupporting Evidence: " + "e" * (EVIDENCE_MAX_CHARS + 1) + "\nScore: 1")
    longest = (
        "Criteria: " + "c" * CRITERIA_MAX_CHARS + "\nSupporting Evidence: " + "e" * EVIDENCE_MAX_CHARS + "\nScore: 1"
    )
    assert pattern.fullmatch(longest)
    assert len(longest) <= COT_MAX_TOKENS  # one character per token at worst: the grammar always completes


def test_expected_score_reads_the_digit_distribution() -> None:
    tokens = ["Score", ":", " ", "2"]
    top = [{"Score": 0.0}, {":": 0.0}, {" ": 0.0}, {"2": math.log(0.5), "3": math.log(0.5), "x": math.log(0.0001)}]
    assert expected_score(tokens, top) == pytest.approx((2 * 0.5 + 3 * 0.5) / 3 / 1.0, rel=1e-3)


def test_expected_score_handles_space_prefixed_digits_and_masked_tokens() -> None:
    tokens = [" 0"]
    top = [{" 0": math.log(0.6), " 1": math.log(0.2), "1": math.log(0.2), " 2": -math.inf}]
    assert expected_score(tokens, top) == pytest.approx((0.4 * 1) / 3)


def test_expected_score_is_none_without_a_digit() -> None:
    assert expected_score(["Score", ":"], [{}, {}]) is None
    assert expected_score([], []) is None
