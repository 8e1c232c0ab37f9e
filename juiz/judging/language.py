"""Which prompt language fits a question: Portuguese or English, from common function words and diacritics.

Only two languages are in play, so a word count is enough and needs no model; ties go to English.
"""

from __future__ import annotations

import re

_PT = frozenset(
    [
        "que",
        "de",
        "não",
        "o",
        "a",
        "os",
        "as",
        "um",
        "uma",
        "em",
        "no",
        "na",
        "nos",
        "nas",
        "para",
        "com",
        "por",
        "qual",
        "quais",
        "como",
        "é",
        "são",
        "do",
        "da",
        "dos",
        "das",
        "se",
        "mais",
        "ao",
        "à",
        "pelo",
        "pela",
        "onde",
        "quando",
        "porque",
        "quem",
        "isso",
        "este",
        "esta",
        "essa",
        "também",
        "entre",
        "sobre",
    ]
)
_EN = frozenset(
    [
        "the",
        "is",
        "are",
        "what",
        "which",
        "how",
        "why",
        "who",
        "when",
        "where",
        "does",
        "do",
        "of",
        "and",
        "to",
        "in",
        "for",
        "with",
        "by",
        "a",
        "an",
        "on",
        "that",
        "this",
        "it",
        "be",
        "can",
        "was",
        "were",
        "from",
    ]
)
_PT_LETTERS = re.compile(r"[ãõçâêôáéíóúà]", re.IGNORECASE)


def detect_language(text: str) -> str:
    """'pt' or 'en'."""
    words = re.findall(r"[^\W\d_]+", text.lower())
    pt = sum(w in _PT for w in words) + 2 * len(_PT_LETTERS.findall(text))
    en = sum(w in _EN for w in words)
    return "pt" if pt > en else "en"
