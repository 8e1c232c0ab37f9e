"""A deterministic sentence splitter for answers (groundedness checks ask about each sentence on its own).

Rules, in order: line breaks and list bullets end a sentence; so do `.`, `!`, `?`, `…` and `;` followed by a blank and
then a capital letter, a digit, a quote or an opening bracket, except after a known abbreviation, a single letter
(initials) or a number's decimal point. A sentence with fewer than MIN_WORDS words or no letter is too slight to
be asked on its own, but it is never dropped: it joins the sentence before it (a leading one, the sentence after), and
an answer made only of such sentences is one sentence, so a terse answer ("16 weeks.") is asked like any other and
nothing an answer says goes unasked.
An answer of more than MAX_SENTENCES sentences is grouped into MAX_SENTENCES runs of consecutive sentences, so every
word is still checked and the work per item stays bounded.
"""

from __future__ import annotations

import itertools
import re

MIN_WORDS = 3
MAX_SENTENCES = 8

# English and Portuguese abbreviations that end in a period without ending a sentence (compared case-folded). Legal
# citations ("art. 49 do CDC", "inc. II", "sec. 4") are common in both languages' answers: a split there leaves two
# fragments no passage can state.
ABBREVIATIONS = frozenset(
    [
        "art",
        "arts",
        "inc",
        "par",
        "sec",
        "secs",
        "ch",
        "pp",
        "op",
        "cit",
        "obs",
        "num",
        "núm",
        "e.g",
        "i.e",
        "etc",
        "vs",
        "cf",
        "al",
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "sr",
        "sra",
        "srs",
        "dra",
        "st",
        "no",
        "nº",
        "p.ex",
        "ex",
        "fig",
        "approx",
        "aprox",
        "pág",
        "pag",
        "cap",
        "vol",
        "ed",
        "jan",
        "fev",
        "feb",
        "mar",
        "abr",
        "apr",
        "mai",
        "may",
        "jun",
        "jul",
        "ago",
        "aug",
        "set",
        "sep",
        "out",
        "oct",
        "nov",
        "dez",
        "dec",
    ]
)
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_BOUNDARY = re.compile(r"(?<=[.!?…;])\s+(?=[\"'“‘(\[A-ZÀ-ÖØ-Þ0-9])")


def _ends_with_abbreviation(text: str) -> bool:
    last = text.rsplit(None, 1)[-1] if text.strip() else ""
    word = last.rstrip(".").lstrip("(\"'“‘").casefold()
    return last.endswith(".") and (word in ABBREVIATIONS or len(word) == 1)


def _split_line(line: str) -> list[str]:
    pieces: list[str] = []
    start = 0
    for match in _BOUNDARY.finditer(line):
        candidate = line[start : match.start()]
        if _ends_with_abbreviation(candidate):
            continue
        pieces.append(candidate)
        start = match.end()
    pieces.append(line[start:])
    return pieces


def _trivial(sentence: str, min_words: int) -> bool:
    return len(sentence.split()) < min_words or not re.search(r"[^\W\d_]", sentence)


def _joined(sentences: list[str], min_words: int) -> list[str]:
    """Each trivial sentence joined to the one before it (leading ones to the first that is not trivial); all of them
    trivial: one sentence, unless there is nothing in it to ask (no letter or digit)."""
    kept: list[str] = []
    leading: list[str] = []
    for sentence in sentences:
        if not _trivial(sentence, min_words):
            kept.append(" ".join([*leading, sentence]))
            leading = []
        elif kept:
            kept[-1] = f"{kept[-1]} {sentence}"
        else:
            leading.append(sentence)
    if leading:  # no sentence that is not trivial
        whole = " ".join(leading)
        return [whole] if re.search(r"[^\W_]", whole) else []
    return kept


def split_sentences(text: str, min_words: int = MIN_WORDS) -> list[str]:
    """The answer's sentences, in order, trivial ones joined to a neighbour, at most MAX_SENTENCES (longer answers in
    grouped runs); empty only for an answer with no letter or digit.

    `min_words=1` asks every sentence with a letter on its own (a check for text aimed at a grader must see
    "SCORE: 3")."""
    sentences = []
    for line in text.splitlines():
        line = _BULLET.sub("", line).strip()
        if line:
            sentences += [s.strip() for s in _split_line(line) if s.strip()]
    kept = _joined(sentences, min_words)
    if len(kept) <= MAX_SENTENCES:
        return kept
    bounds = [len(kept) * k // MAX_SENTENCES for k in range(MAX_SENTENCES + 1)]  # runs as even as they can be
    return [" ".join(kept[a:b]) for a, b in itertools.pairwise(bounds)]
