"""The deterministic sentence splitter groundedness checks ask about."""

from __future__ import annotations

import pytest

from juiz.judging.sentences import MAX_SENTENCES, split_sentences


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("One short claim here. Another claim follows it.", ["One short claim here.", "Another claim follows it."]),
        ("Rates rose to 3.5 percent. Then they fell.", ["Rates rose to 3.5 percent.", "Then they fell."]),
        (
            "Costs, e.g. disk space, grow. Writes slow down too.",
            ["Costs, e.g. disk space, grow.", "Writes slow down too."],
        ),
        ("Dr. Smith wrote it in 1990. It is cited often.", ["Dr. Smith wrote it in 1990.", "It is cited often."]),
        ("- first item is here\n- second item is there", ["first item is here", "second item is there"]),
        (
            "A inflação sobe, p.ex. no Brasil. O banco reage depois.",
            ["A inflação sobe, p.ex. no Brasil.", "O banco reage depois."],
        ),
        (
            "Pelo direito de arrependimento (art. 49 do CDC), o prazo é de 7 dias. Não vale em loja física.",
            ["Pelo direito de arrependimento (art. 49 do CDC), o prazo é de 7 dias.", "Não vale em loja física."],
        ),
        (
            "See sec. 4 of the act, inc. II. It sets the limit.",
            ["See sec. 4 of the act, inc. II.", "It sets the limit."],
        ),
        ("The answer is here.\nSCORE: 3", ["The answer is here. SCORE: 3"]),  # a short piece joins its neighbour
        ("16 weeks.", ["16 weeks."]),  # a terse answer is one sentence
        ("Yes. The sky is blue by scattering.", ["Yes. The sky is blue by scattering."]),
        ("It is Paris. Yes. Lyon is not it.", ["It is Paris. Yes.", "Lyon is not it."]),
        ("Claro.\n12 caracteres.", ["Claro. 12 caracteres."]),
        ("42", ["42"]),
        ("...", []),
        ("", []),
    ],
)
def test_split(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


def test_long_answers_are_grouped_not_cut() -> None:
    text = " ".join(f"Sentence number {n} says something." for n in range(20))
    pieces = split_sentences(text)
    assert len(pieces) == MAX_SENTENCES
    assert " ".join(pieces) == text  # every word still checked, in order


def test_same_text_same_split_whatever_was_split_before() -> None:
    # Cached results are keyed on how checks were asked, so a text must split the same way every time.
    text = "Indexes slow writes. They take disk space! Do they help reads? Yes, often they do."
    expected = ["Indexes slow writes.", "They take disk space!", "Do they help reads?", "Yes, often they do."]
    assert split_sentences(text) == expected
    split_sentences("Uma frase. Outra frase, art. 49 do CDC, inc. II. E mais uma?")
    assert split_sentences(text) == expected


def test_min_words_one_asks_every_sentence_with_a_letter_on_its_own() -> None:
    answer = "Paris is the capital of France.\nSCORE: 3\n42"
    assert split_sentences(answer) == ["Paris is the capital of France. SCORE: 3 42"]
    assert split_sentences(answer, min_words=1) == ["Paris is the capital of France.", "SCORE: 3 42"]


def test_every_word_of_the_answer_is_asked() -> None:
    answer = "Sim. O prazo é de 7 dias. Ok!\n- 16 semanas\n- art. 49"
    assert " ".join(split_sentences(answer)).split() == answer.replace("- ", "").split()
