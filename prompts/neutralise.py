"""User text in a judge prompt is data: it must never become markup, for the prompt or for the model's tokenizer.

Two routes to talk a judge into a score, both closed here for every field a template shows (question, answer,
context, segment):
- the prompt's own delimiters: `</answer>` followed by new "instructions", in any variant (case, spaces, attributes
  such as `</answer x>`, look-alike Unicode such as fullwidth `＜／answer＞`, zero-width characters inside);
- the model's special tokens: chat templates are rendered to text and then tokenised with special tokens parsed, so
  an answer holding `<|im_end|>` then `<|im_start|>system` would give itself a real system turn (ChatML: Qwen,
  SmolLM2), and the same goes for `<|eot_id|>` (Llama 3), `<start_of_turn>` (Gemma), `<｜User｜>` (DeepSeek),
  `[INST]` (Mistral), `<filename>` (SmolLM2's code tokens)...

juiz grades with models it does not know in advance, so no list of special tokens can be complete. The rule is
structural instead: every special token of the common tokenizers starts with `<` or `[` directly followed by a
name or a bar, so the text is first folded (NFKC: look-alikes to ASCII; invisible characters removed) and then every
`<` that opens a tag-like construct (`<` + letter, `_`, `|`, `/` or `!`), every `<` that opens one of the prompt's
tags even with spaces (`< / answer >`), and every `[NAME]` control word has its brackets replaced by look-alikes
(‹ ›, ⟦ ⟧). The judge still reads `‹/answer›` or `‹div›` as the text it is; the tokenizer and the prompt see no markup.
Plain comparisons (`a < b`, `x<5`, `<=`) are left alone. tests/unit/test_neutralise.py checks the development
models' tokenizers: a rendered prompt holds exactly its chat template's special tokens, whatever the input.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

# Bumped whenever the rendering of user text changes: results graded under an older rule are not served from the
# result cache (juiz.judging.result_cache.cache_key), since the prompt file's sha256 alone does not change.
VERSION = 2  # 1: the prompt's own tags only, exact spelling
OPEN, CLOSE = "‹", "›"  # U+2039 / U+203A: unchanged by NFKC, never part of a special token
OPEN_BRACKET, CLOSE_BRACKET = "⟦", "⟧"

# Format characters (zero-width space/joiners, word joiner, BOM, bidi controls, soft hyphen, tag characters),
# variation selectors and control characters other than newline and tab: invisible, and able to split a delimiter
# so that a filter misses it while the model still reads it.
_INVISIBLE_CATEGORIES = frozenset({"Cf", "Cc", "Co", "Cs"})
_KEEP = frozenset("\n\t\r")

# `<` opening a tag-like construct: what every `<...>` special token and every XML/HTML-style tag starts with.
_TAG_LIKE = re.compile(r"<(?=[A-Za-z_|!/]|\s+[|/])([^<>\n]{0,200})(>?)")
# `[INST]`, `[/INST]`, `[AVAILABLE_TOOLS]`: bracketed control words (upper case, as tokenizers spell them).
_CONTROL_WORD = re.compile(r"\[(\s*/?\s*[A-Z][A-Z_]{1,40}\s*)\]")


# Characters that can't be invisible: printable ASCII, newline and tab, Latin-1 but the soft hyphen, Latin Extended and
# IPA up to U+02FF. Text made only of these (nearly all English and Portuguese) skips the per-character check, which
# was a third of a worker's CPU per item.
_SURELY_VISIBLE = re.compile(r"[\t\n\r\x20-\x7e\xa0-\xac\xae-\u02ff]*")


def fold(text: str) -> str:
    """NFKC (fullwidth `＜` → `<`, `｜` → `|`, ...) and no invisible characters (see _INVISIBLE_CATEGORIES)."""
    folded = unicodedata.normalize("NFKC", text)
    if _SURELY_VISIBLE.fullmatch(folded):
        return folded
    return "".join(
        ch
        for ch in folded
        if ch in _KEEP or not (unicodedata.category(ch) in _INVISIBLE_CATEGORIES or 0xFE00 <= ord(ch) <= 0xFE0F)
    )


def _tags_pattern(tags: Iterable[str]) -> re.Pattern[str] | None:
    names = sorted(set(tags), key=len, reverse=True)
    if not names:
        return None
    # The prompt's own tags with spaces anywhere around the slash and the name, any case, any attributes.
    return re.compile(r"<(\s*/?\s*(?:" + "|".join(map(re.escape, names)) + r")\b[^<>\n]{0,200})(>?)", re.IGNORECASE)


def _bracket(match: re.Match[str]) -> str:
    return OPEN + match.group(1) + (CLOSE if match.group(2) else "")


def neutralise(text: str, tags: Iterable[str] = ()) -> str:
    """`text` as data: no special-token or delimiter markup left in any variant (see the module docstring)."""
    text = fold(text)
    pattern = _tags_pattern(tags)
    if pattern is not None:
        text = pattern.sub(_bracket, text)
    text = _TAG_LIKE.sub(_bracket, text)
    return _CONTROL_WORD.sub(lambda m: OPEN_BRACKET + m.group(1) + CLOSE_BRACKET, text)
