"""The context segments a sentence of the answer is about: the passage a sentence-level support check shows.

A small judge asked whether one sentence is supported by a long context says yes to nearly everything; asked about the
same sentence beside the few segments that share its words, with worked examples, it reads the passage (MiniCheck's
"claim against its evidence chunk"). The segments are ranked by TF-IDF cosine similarity to the sentence, weighted
over this item's segments only (no stop-word list, so any language works), and shown in the context's order.
Deterministic: the same sentence and context always give the same passage.
"""

from __future__ import annotations

from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.metrics.pairwise import linear_kernel


def passage_for(sentence: str, segments: list[str], size: int) -> str:
    """The `size` segments most similar to `sentence`, numbered as in the context and in its order."""
    if not segments:
        return ""
    chosen: list[int] = list(range(len(segments)))
    if len(segments) > size:
        try:
            vectors = TfidfVectorizer(sublinear_tf=True).fit(segments)
        except ValueError:  # no word in any segment (e.g. only digits or symbols): keep the retriever's first ones
            chosen = list(range(size))
        else:
            similarity = linear_kernel(vectors.transform([sentence]), vectors.transform(segments))[0]
            # Ties (no shared word) go to the earlier segment: the retriever ranked it higher.
            ranked = sorted(range(len(segments)), key=lambda n: (-similarity[n], n))
            chosen = sorted(ranked[:size])
    return "\n\n".join(f"[{n + 1}] {segments[n].strip()}" for n in chosen)
