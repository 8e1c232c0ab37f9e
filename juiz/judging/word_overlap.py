"""How much of a point's wording an answer uses: the share of the point's content words that the answer also has; and
whether an answer only restates the question.

A second reading of "does the ANSWER state this point?" beside the judge's own: counted, not asked, so its errors are
not the small judge's (it misses a point a long, dense answer states; the words miss a paraphrase but never a point
stated in the context's own words, which is how answers built from that context state it). Words are compared
without case or accents by their first letters, so "indexes"/"index" and "cromossomos"/"cromossomo" meet in English
and Portuguese alike; short words (articles, prepositions) don't count, numbers always do.

An answer that restates the question circles its words and adds few of its own; the small judge reads such an answer
as direct and specific. Counted, it is plain: most of the answer's content words are the question's, and those come
back again and again. An answer that echoes the question once to state what it asks ("The capital of France is
Paris.") uses the question's words once each and is not a restatement.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence

import prompts
from schemas.judgement import CheckResult, CheckStatus

WORD = re.compile(r"\w+")
# A word counts from this many letters (shorter ones are mostly function words in both languages) and is compared by
# its first STEM letters (a light stemmer that needs no language: plurals and inflections share their start).
MIN_LETTERS = 4
STEM = 5
# An answer restates the question when fewer than this share of its content words are new to the question...
RESTATES_NEW_BELOW = 0.5
# ...and the question's words it uses come back at least this many times each, on average.
RESTATES_REPEATS_AT_LEAST = 1.5


def _content_tokens(text: str) -> list[str]:
    plain = unicodedata.normalize("NFKD", text.casefold())
    plain = "".join(ch for ch in plain if not unicodedata.combining(ch))
    return [w[:STEM] for w in WORD.findall(plain) if len(w) >= MIN_LETTERS or any(ch.isdigit() for ch in w)]


def content_words(text: str) -> set[str]:
    """The text's content words, lower-cased, without accents, cut to their first STEM letters."""
    return set(_content_tokens(text))


def restates_question(question: str, answer: str) -> bool:
    """Whether the answer only restates the question: few content words of its own (under RESTATES_NEW_BELOW of
    them), and the question's words it uses repeated (RESTATES_REPEATS_AT_LEAST times each on average). An answer
    with no content word to count ("Yes.") restates nothing."""
    asked = content_words(question)
    used = _content_tokens(answer)
    distinct = set(used)
    if not distinct:
        return False
    echoed = [w for w in used if w in asked]
    new_share = len(distinct - asked) / len(distinct)
    repeats = len(echoed) / len(set(echoed)) if echoed else 0.0
    return new_share < RESTATES_NEW_BELOW and repeats >= RESTATES_REPEATS_AT_LEAST


def share(point: str, answer: str) -> float | None:
    """The share of the point's content words the answer uses; None when the point has none to count (the judge's
    reading of it then stands alone)."""
    wanted = content_words(point)
    return len(wanted & content_words(answer)) / len(wanted) if wanted else None


def adds_to_question(question: str, answer: str) -> bool:
    """Does the answer say more than the question's own words? (No when it only restates the question.)"""
    return not restates_question(question, answer)


# The checks a prompt can count instead of asking (prompts.COUNTED_CHECKS), by name: yes or no from the item's text.
COUNTERS: dict[str, Callable[[str, str], bool]] = {"adds_to_question": adds_to_question}


def with_counted(
    template: prompts.PromptTemplate, results: Sequence[CheckResult], question: str, answer: str
) -> list[CheckResult]:
    """The results, each read point of a check with a `words_weight` carrying its `words` share of the answer (None
    for a point with no word to count), and a result for each check the prompt counts from the text instead of asking
    (`ask = "counted"`: yes is 1, no is 0), counted afresh."""
    read_by_words = {c.name for c in template.checks if c.words_weight is not None}
    counted = [c for c in template.checks if c.ask == "counted"]
    recounted = {c.name for c in counted}
    out = []
    for r in results:
        if r.name in recounted:
            continue
        if r.name in read_by_words and r.status is CheckStatus.OK and r.target is not None:
            words = share(r.target, answer)
            r = r.model_copy(update={"words": None if words is None else round(words, 6)})
        out.append(r)
    for check in counted:
        yes = COUNTERS[check.name](question, answer)
        out.append(
            CheckResult(
                name=check.name,
                question=check.question,
                role=check.role,
                yes_means=check.yes_means,
                status=CheckStatus.OK,
                p_yes=float(yes),
                mass=1.0,
            )
        )
    return out
