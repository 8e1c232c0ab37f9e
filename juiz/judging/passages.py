"""What of an item's context the judge is shown: the whole context up to a budget, and the passage beside one
sentence of the answer.

A small judge asked whether one sentence is supported by a long context says yes to nearly everything; asked about the
same sentence beside the few segments that share its words, with worked examples, it reads the passage (MiniCheck's
"claim against its evidence chunk"). Segments are ranked by TF-IDF cosine similarity, weighted over this item's
segments only (no stop-word list, so any language works), and shown in the context's order with the numbers they have
there. Deterministic: the same item always gives the same passages.

A context longer than the batch's budget (`BatchOptions.context_chars`) is cut to the segments the question is most
about (`within_budget` takes several queries in turns, each one's best before any one's second best). The judge's
cost is its prompt tokens, and a retriever's top-k segments (the seeds carry ten transcript excerpts, ~4,700 tokens)
mostly say what the question does not ask.
"""

from __future__ import annotations

from collections.abc import Sequence

from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.metrics.pairwise import linear_kernel


def _ranked(queries: Sequence[str], segments: list[str]) -> list[list[int]] | None:
    """Each query's segments, most similar first (ties to the earlier segment: the retriever ranked it higher); None
    when no segment has a word to weigh (only digits or symbols)."""
    try:
        vectors = TfidfVectorizer(sublinear_tf=True).fit(segments)
    except ValueError:
        return None
    similarity = linear_kernel(vectors.transform(list(queries)), vectors.transform(segments))
    return [sorted(range(len(segments)), key=lambda n: (-row[n], n)) for row in similarity]


def numbered(segments: list[str], chosen: Sequence[int]) -> str:
    """The chosen segments, in the context's order, each with its number in the whole context: [n] text."""
    return "\n\n".join(f"[{n + 1}] {segments[n].strip()}" for n in sorted(chosen))


def passage_for(sentence: str, segments: list[str], size: int) -> str:
    """The `size` segments most similar to `sentence`, numbered as in the context and in its order."""
    if not segments:
        return ""
    chosen: list[int] = list(range(len(segments)))
    if len(segments) > size:
        ranked = _ranked([sentence], segments)
        chosen = list(range(size)) if ranked is None else ranked[0][:size]
    return numbered(segments, chosen)


def within_budget(segments: list[str], queries: Sequence[str], budget_chars: int | None) -> list[int]:
    """The segments shown when the whole context may not exceed `budget_chars` characters (None: no budget): all of
    them when they fit; else the queries' most similar ones taken in turns (each query's best, then each one's second
    best, ...), skipping a segment that would overflow the budget. At least one segment is always shown."""
    everything = list(range(len(segments)))
    if budget_chars is None or sum(len(s.strip()) for s in segments) <= budget_chars:
        return everything
    ranked = _ranked([q for q in queries if q.strip()] or [""], segments)
    # Each query's best, then each one's second best, ...: every claim's evidence before any claim's second choice.
    turns = zip(*ranked, strict=True) if ranked is not None else [everything]
    order = list(dict.fromkeys(n for turn in turns for n in turn))
    chosen: list[int] = []
    used = 0
    for n in order:
        size = len(segments[n].strip())
        if chosen and used + size > budget_chars:
            continue
        chosen.append(n)
        used += size
    return sorted(chosen)
