"""Labelled claims built from a corpus without people: what the verifier learns from (`juiz synth`).

From passages grouped by document, each example pairs one claim with the passages it is checked against:
- supported: a passage's sentence as written, or its longest clause;
- contradicted: the same sentence with one fact changed for another of the same kind: a number for another number of
  the corpus (or a scaled one), a name for another name of the corpus, a negation added or removed, a word for its
  opposite (more/less, before/after…);
- not_stated: a sentence of another document, checked against this one's passages.

Negations and opposites are listed for English and Portuguese, the languages the judge's prompts speak; a sentence of
another language still gets its number, name and other-document examples. Deterministic for a given seed.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass

from juiz.judging.language import detect_language
from juiz.judging.sentences import split_sentences

SUPPORTED = "supported"
CONTRADICTED = "contradicted"
NOT_STATED = "not_stated"
LABELS = (SUPPORTED, CONTRADICTED, NOT_STATED)
# Passages checked with each claim: its own and this many others, as a retriever returns near misses with a hit.
OTHER_PASSAGES = 2
MIN_CLAUSE_WORDS = 5

NUMBER = re.compile(r"(?<![\w.,])\d+(?:[.,]\d+)*(?![\w])")
# A capitalised word that doesn't start the sentence: a name, a place, an acronym.
NAME = re.compile(r"(?<=[^\s.!?]\s)[A-ZÀ-ÖØ-Þ][\w-]{2,}")

_EN_AUXILIARIES = tuple(
    [
        "is",
        "are",
        "was",
        "were",
        "can",
        "could",
        "does",
        "do",
        "did",
        "will",
        "would",
        "has",
        "have",
        "had",
        "should",
        "must",
        "may",
        "might",
    ]
)
_PT_VERBS = tuple(
    [
        "é",
        "são",
        "foi",
        "foram",
        "era",
        "eram",
        "pode",
        "podem",
        "tem",
        "têm",
        "está",
        "estão",
        "deve",
        "devem",
        "faz",
        "fazem",
        "há",
        "vai",
        "vão",
    ]
)
NEGATIONS = {
    "en": (re.compile(r"\b(" + "|".join(_EN_AUXILIARIES) + r")\b(?! not\b)"), r"\1 not", re.compile(r"\bnot ")),
    "pt": (re.compile(r"(?<!não )\b(" + "|".join(_PT_VERBS) + r")\b"), r"não \1", re.compile(r"\bnão ")),
}
# Pairs of opposites; each is swapped both ways (whole words, case kept for the first letter).
OPPOSITES = {
    "en": [
        ("more", "less"),
        ("increase", "decrease"),
        ("increases", "decreases"),
        ("higher", "lower"),
        ("before", "after"),
        ("first", "last"),
        ("larger", "smaller"),
        ("faster", "slower"),
        ("always", "never"),
        ("most", "least"),
        ("rises", "falls"),
        ("above", "below"),
        ("inside", "outside"),
        ("early", "late"),
    ],
    "pt": [
        ("mais", "menos"),
        ("aumenta", "diminui"),
        ("aumentam", "diminuem"),
        ("maior", "menor"),
        ("maiores", "menores"),
        ("antes", "depois"),
        ("primeiro", "último"),
        ("sempre", "nunca"),
        ("alta", "baixa"),
        ("alto", "baixo"),
        ("acima", "abaixo"),
        ("dentro", "fora"),
        ("sobe", "desce"),
    ],
}


@dataclass(frozen=True)
class Passage:
    text: str
    document: str


@dataclass(frozen=True)
class Example:
    """One labelled claim and the passages it is checked against; `how` says how it was made."""

    claim: str
    passages: tuple[str, ...]
    label: str
    how: str
    document: str
    lang: str

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "passages": list(self.passages)}

    @classmethod
    def from_json(cls, row: dict[str, object]) -> Example:
        passages = row.get("passages")
        if not isinstance(row.get("claim"), str) or not isinstance(passages, list) or row.get("label") not in LABELS:
            raise ValueError("an example needs a claim, a list of passages and a label of " + ", ".join(LABELS))
        return cls(
            claim=str(row["claim"]),
            passages=tuple(str(p) for p in passages),
            label=str(row["label"]),
            how=str(row.get("how", "")),
            document=str(row.get("document", "")),
            lang=str(row.get("lang", "")),
        )


def build_examples(passages: Iterable[Passage], seed: int = 0, per_sentence: int = 1) -> list[Example]:
    """Examples from every sentence of every distinct passage: one supported, and up to `per_sentence` of each kind
    of contradiction and one not-stated claim, where the sentence allows them."""
    distinct = list(dict.fromkeys(p for p in passages if p.text.strip()))
    if len({p.document for p in distinct}) < 2:
        raise ValueError("synthetic examples need passages from at least two documents (not-stated claims)")
    rng = random.Random(seed)
    numbers = sorted({n for p in distinct for n in NUMBER.findall(p.text)})
    names = sorted({n for p in distinct for n in NAME.findall(p.text)})
    examples: list[Example] = []
    for passage in distinct:
        lang = detect_language(passage.text)
        others = [p for p in distinct if p is not passage]
        elsewhere = [p for p in others if p.document != passage.document]
        for sentence in split_sentences(passage.text, min_words=MIN_CLAUSE_WORDS):
            context = (passage.text, *(p.text for p in rng.sample(others, min(OTHER_PASSAGES, len(others)))))

            made = [(sentence, SUPPORTED, "verbatim")]
            clause = longest_clause(sentence)
            if clause:
                made.append((clause, SUPPORTED, "clause"))
            made += [
                (c, CONTRADICTED, how) for how, c in _contradictions(sentence, lang, numbers, names, rng, per_sentence)
            ]
            if elsewhere:
                donated = split_sentences(rng.choice(elsewhere).text, min_words=MIN_CLAUSE_WORDS)
                if donated:
                    made.append((rng.choice(donated), NOT_STATED, "other_document"))
            examples += [Example(claim, context, label, how, passage.document, lang) for claim, label, how in made]
    return examples


def longest_clause(sentence: str) -> str | None:
    """The longest comma- or semicolon-separated part of a sentence, when it is a real part of it."""
    parts = [p.strip() for p in re.split(r"[,;:]\s+", sentence) if p.strip()]
    if len(parts) < 2:
        return None
    best = max(parts, key=lambda p: len(p.split()))
    return best if len(best.split()) >= MIN_CLAUSE_WORDS else None


def _contradictions(
    sentence: str, lang: str, numbers: Sequence[str], names: Sequence[str], rng: random.Random, per_sentence: int
) -> Iterator[tuple[str, str]]:
    makers = (
        ("number_swap", lambda: swap_number(sentence, numbers, rng)),
        ("name_swap", lambda: swap_name(sentence, names, rng)),
        ("negation", lambda: flip_negation(sentence, lang)),
        ("opposite", lambda: swap_opposite(sentence, lang)),
    )
    for how, make in makers:
        for _ in range(per_sentence):
            changed = make()
            if changed and changed != sentence:
                yield how, changed


def swap_number(sentence: str, corpus_numbers: Sequence[str], rng: random.Random) -> str | None:
    found = list(NUMBER.finditer(sentence))
    if not found:
        return None
    target = rng.choice(found)
    candidates = [n for n in corpus_numbers if n != target.group()]
    if candidates:
        replacement = rng.choice(candidates)
    else:  # a corpus with one number: change its size instead
        digits = target.group().replace(",", "").replace(".", "")
        replacement = str(int(digits) * rng.choice((2, 3, 10)) + 1)
    return sentence[: target.start()] + replacement + sentence[target.end() :]


def swap_name(sentence: str, corpus_names: Sequence[str], rng: random.Random) -> str | None:
    found = list(NAME.finditer(sentence))
    present = {m.group().casefold() for m in found}
    candidates = [n for n in corpus_names if n.casefold() not in present]
    if not found or not candidates:
        return None
    target = rng.choice(found)
    return sentence[: target.start()] + rng.choice(candidates) + sentence[target.end() :]


def flip_negation(sentence: str, lang: str) -> str | None:
    """Remove the sentence's negation if it has one, else add one after its first auxiliary (before it in
    Portuguese)."""
    if lang not in NEGATIONS:
        return None
    add, replacement, remove = NEGATIONS[lang]
    if remove.search(sentence):
        return remove.sub("", sentence, count=1)
    changed = add.sub(replacement, sentence, count=1)
    return changed if changed != sentence else None


def swap_opposite(sentence: str, lang: str) -> str | None:
    for a, b in OPPOSITES.get(lang, ()):
        for word, opposite in ((a, b), (b, a)):
            match = re.search(rf"\b{word}\b", sentence, flags=re.IGNORECASE)
            if match:
                found = match.group()
                swapped = opposite.capitalize() if found[0].isupper() else opposite
                return sentence[: match.start()] + swapped + sentence[match.end() :]
    return None
