"""How much of a point's wording an answer uses: the share of the point's content words that the answer also has.

A second reading of "does the ANSWER state this point?" beside the judge's own: counted, not asked, so its errors are
not the small judge's (it misses a point a long, dense answer states; the words miss a paraphrase but never a point
stated in the context's own words, which is how answers built from that context state it). Words are compared
without case or accents by their first letters, so "indexes"/"index" and "cromossomos"/"cromossomo" meet in English
and Portuguese alike; short words (articles, prepositions) don't count, numbers always do.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

import prompts
from schemas.judgement import CheckResult, CheckStatus

WORD = re.compile(r"\w+")
# A word counts from this many letters (shorter ones are mostly function words in both languages) and is compared by
# its first STEM letters (a light stemmer that needs no language: plurals and inflections share their start).
MIN_LETTERS = 4
STEM = 5


def content_words(text: str) -> set[str]:
    """The text's content words, lower-cased, without accents, cut to their first STEM letters."""
    plain = unicodedata.normalize("NFKD", text.casefold())
    plain = "".join(ch for ch in plain if not unicodedata.combining(ch))
    return {w[:STEM] for w in WORD.findall(plain) if len(w) >= MIN_LETTERS or any(ch.isdigit() for ch in w)}


def share(point: str, answer: str) -> float | None:
    """The share of the point's content words the answer uses; None when the point has none to count (the judge's
    reading of it then stands alone)."""
    wanted = content_words(point)
    return len(wanted & content_words(answer)) / len(wanted) if wanted else None


def with_word_shares(
    template: prompts.PromptTemplate, results: Sequence[CheckResult], answer: str
) -> list[CheckResult]:
    """The results, each read point of a check with a `words_weight` carrying its `words` share of the answer (None
    for a point with no word to count)."""
    counted = {c.name for c in template.checks if c.words_weight is not None}
    out = []
    for r in results:
        if r.name in counted and r.status is CheckStatus.OK and r.target is not None:
            words = share(r.target, answer)
            r = r.model_copy(update={"words": None if words is None else round(words, 6)})
        out.append(r)
    return out
