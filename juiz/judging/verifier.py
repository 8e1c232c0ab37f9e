"""A light verifier of claims against passages, trained on synthetic examples (`juiz train`), no GPU needed.

The judge reads "is this sentence supported?" from one yes/no answer of a small model, and a small model reads a
sentence with one number or name changed as supported (it matches the passage almost word for word). The verifier
looks at exactly that: lexical signals of a changed fact between a claim and the passage sentence closest to it —
numbers and names absent from the passages, a negation or an opposite the closest sentence doesn't have, how much of
the claim the passages hold — weighed by a logistic head fitted to examples built from the user's own corpus
(juiz.judging.synthetic). It answers P(supported) per claim; an answer's is its least supported sentence's.

The artefact is a small JSON file (weights, the feature names, how it was trained) that results name in their
provenance; it is selected like a prompt version and is never the default without a win on the test split.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from juiz.judging.language import detect_language
from juiz.judging.sentences import split_sentences
from juiz.judging.synthetic import NAME, NEGATIONS, NUMBER, OPPOSITES, SUPPORTED, Example

FORMAT = "juiz-verifier/1"
FEATURES = (
    "numbers_absent",  # share of the claim's numbers found in no passage
    "numbers_differ_closest",  # the claim has a number its closest sentence lacks, and that sentence has numbers
    "names_absent",  # share of the claim's capitalised words found in no passage
    "negation_differs",  # the claim and its closest sentence disagree on being negated
    "opposite_differs",  # the claim uses a word whose opposite the closest sentence uses instead
)
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def _words(text: str) -> list[str]:
    return [w.casefold() for w in _WORD.findall(text)]


def _numbers(text: str) -> set[str]:
    return {n.replace(",", ".") for n in NUMBER.findall(text)}


def _negated(text: str) -> bool:
    return any(remove.search(text.casefold()) for _, _, remove in NEGATIONS.values())


def _opposite_differs(claim: list[str], closest: set[str]) -> float:
    pairs = [pair for pairs in OPPOSITES.values() for pair in pairs]
    for a, b in pairs:
        for word, opposite in ((a, b), (b, a)):
            if word in claim and word not in closest and opposite in closest:
                return 1.0
    return 0.0


def features(claim: str, passages: Sequence[str]) -> list[float]:
    """The claim's feature vector, in FEATURES order."""
    claim_words = _words(claim)
    content = [w for w in claim_words if len(w) > 3 or w.isdigit()] or claim_words
    sentences = [s for p in passages for s in (split_sentences(p, min_words=1) or [p])]
    everything = {w for p in passages for w in _words(p)}

    def containment(words: set[str]) -> float:
        return sum(w in words for w in content) / len(content) if content else 0.0

    closest_text = max(sentences, key=lambda s: containment(set(_words(s))), default="")
    closest = set(_words(closest_text))
    claim_numbers = _numbers(claim)
    passage_numbers = set().union(*(_numbers(p) for p in passages)) if passages else set()
    closest_numbers = _numbers(closest_text)
    names = [n.casefold() for s in split_sentences(claim, min_words=1) for n in NAME.findall(s)]
    return [
        len(claim_numbers - passage_numbers) / len(claim_numbers) if claim_numbers else 0.0,
        float(bool(claim_numbers - closest_numbers) and bool(closest_numbers)),
        sum(n not in everything for n in names) / len(names) if names else 0.0,
        float(_negated(claim) != _negated(closest_text)),
        _opposite_differs(claim_words, closest),
    ]


@dataclass(frozen=True)
class Verifier:
    """A logistic head over FEATURES; `trained_on` says what it learned from (for provenance)."""

    weights: tuple[float, ...]
    bias: float
    trained_on: dict[str, Any] = field(default_factory=dict)

    @property
    def version(self) -> str:
        blob = json.dumps([self.weights, self.bias], sort_keys=True).encode()
        return "verifier-" + hashlib.sha256(blob).hexdigest()[:12]

    def p_supported(self, claim: str, passages: Sequence[str]) -> float:
        z = self.bias + sum(w * x for w, x in zip(self.weights, features(claim, passages), strict=True))
        return 1.0 / (1.0 + math.exp(-z))

    def answer_support(self, answer: str, passages: Sequence[str]) -> float | None:
        """The least supported sentence's P(supported); None for an answer with no words or no passages."""
        sentences = split_sentences(answer, min_words=1) or ([answer] if answer.strip() else [])
        if not sentences or not passages:
            return None
        return min(self.p_supported(s, passages) for s in sentences)

    def save(self, path: Path) -> None:
        document = {
            "format": FORMAT,
            "version": self.version,
            "features": list(FEATURES),
            "weights": list(self.weights),
            "bias": self.bias,
            "trained_on": self.trained_on,
        }
        path.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> Verifier:
        document = json.loads(path.read_text(encoding="utf-8"))
        if document.get("format") != FORMAT or document.get("features") != list(FEATURES):
            raise ValueError(f"{path} is not a {FORMAT} verifier with this version's features")
        return cls(tuple(document["weights"]), float(document["bias"]), document.get("trained_on", {}))


def train(examples: Iterable[Example], seed: int = 0) -> Verifier:
    """Fit the head to synthetic examples: supported against contradicted and not stated, classes weighed equally."""
    from sklearn.linear_model import LogisticRegression  # imported here: training only, not grading

    rows = list(examples)
    labels = [int(e.label == SUPPORTED) for e in rows]
    if len(set(labels)) < 2:
        raise ValueError("training needs both supported and unsupported examples")
    matrix = [features(e.claim, e.passages) for e in rows]
    model = LogisticRegression(class_weight="balanced", max_iter=1000, random_state=seed).fit(matrix, labels)
    hows: dict[str, int] = {}
    for e in rows:
        hows[e.how] = hows.get(e.how, 0) + 1
    languages = sorted({e.lang or detect_language(e.claim) for e in rows})
    return Verifier(
        weights=tuple(float(w) for w in model.coef_[0]),
        bias=float(model.intercept_[0]),
        trained_on={"examples": len(rows), "by_how": hows, "languages": languages, "seed": seed},
    )
