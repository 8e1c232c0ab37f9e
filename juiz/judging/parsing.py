"""The judge's reply format, in one place: the grammar vLLM enforces, and the parser that reads it back.

Replies look like `Criteria: … / Supporting Evidence: … / Score: N`, on separate lines (as juiz asks) or run
together on one line (as in the seeds' reports). The score is read from the last `Score:` label only — never the
smallest or first number in the text — and anything that does not yield a 0–3 score is a parse error that keeps the
raw text, never a silent 0 or −1.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

# Free-text parts are bounded so a reply always reaches its `Score:` line within max_tokens: every token the grammar
# admits covers at least one character, so 600 characters of free text plus the labels can never need more than
# COT_MAX_TOKENS tokens, whatever the tokenizer. A good judge stops far earlier (~60–150 tokens).
CRITERIA_MAX_CHARS = 200
EVIDENCE_MAX_CHARS = 400
COT_REPLY_REGEX = (
    rf"Criteria: [^\n]{{1,{CRITERIA_MAX_CHARS}}}\n"
    rf"Supporting Evidence: [^\n]{{1,{EVIDENCE_MAX_CHARS}}}\n"
    r"Score: [0-3]"
)
_TEMPLATE_FIXED_CHARS = len("Criteria: \nSupporting Evidence: \nScore: 0")
COT_MAX_TOKENS = CRITERIA_MAX_CHARS + EVIDENCE_MAX_CHARS + _TEMPLATE_FIXED_CHARS
SCORE_DIGITS = ("0", "1", "2", "3")

# Context relevance grades every segment of every item, so its CoT is shorter: the same template and the same
# guarantee (the Score line within max_tokens), at about a third of the worst-case decode of a full reply.
SEGMENT_CRITERIA_MAX_CHARS = 80
SEGMENT_EVIDENCE_MAX_CHARS = 140
SEGMENT_REPLY_REGEX = (
    rf"Criteria: [^\n]{{1,{SEGMENT_CRITERIA_MAX_CHARS}}}\n"
    rf"Supporting Evidence: [^\n]{{1,{SEGMENT_EVIDENCE_MAX_CHARS}}}\n"
    r"Score: [0-3]"
)
SEGMENT_MAX_TOKENS = SEGMENT_CRITERIA_MAX_CHARS + SEGMENT_EVIDENCE_MAX_CHARS + _TEMPLATE_FIXED_CHARS


def reply_gbnf(criteria_max_chars: int, evidence_max_chars: int) -> str:
    """The reply format in llama.cpp's GBNF (it takes no regex): the same lines and bounds as the regex above."""
    return (
        f'root ::= "Criteria: " [^\\n]{{1,{criteria_max_chars}}} "\\n" '
        f'"Supporting Evidence: " [^\\n]{{1,{evidence_max_chars}}} "\\n" "Score: " [0-3]'
    )


COT_REPLY_GBNF = reply_gbnf(CRITERIA_MAX_CHARS, EVIDENCE_MAX_CHARS)
SEGMENT_REPLY_GBNF = reply_gbnf(SEGMENT_CRITERIA_MAX_CHARS, SEGMENT_EVIDENCE_MAX_CHARS)

_LABEL = r"[*_\s]*{name}[*_\s]*:[*_\s]*"
_SCORE_LABEL = re.compile(_LABEL.format(name="Score"), re.IGNORECASE)
_CRITERIA_LABEL = re.compile(_LABEL.format(name="Criteria"), re.IGNORECASE)
_EVIDENCE_LABEL = re.compile(_LABEL.format(name=r"Supporting\s+Evidence"), re.IGNORECASE)
# The value right after the last Score label: a lone digit, optionally "/3" or "out of 3" after it.
_SCORE_VALUE = re.compile(r"(\d+(?:[.,]\d+)?)")


@dataclass(frozen=True)
class ParsedReply:
    score: int | None
    criteria: str | None
    supporting_evidence: str | None
    error: str | None = None  # why score is None

    @property
    def ok(self) -> bool:
        return self.score is not None


def parse_reply(text: str) -> ParsedReply:
    """Read a CoT reply (or a bare digit from the fast mode)."""
    stripped = text.strip()
    if stripped in SCORE_DIGITS:
        return ParsedReply(score=int(stripped), criteria=None, supporting_evidence=None)
    score_labels = list(_SCORE_LABEL.finditer(text))
    if not score_labels:
        return ParsedReply(None, *_free_text(text, len(text)), error="no 'Score:' line in the reply")
    last = score_labels[-1]
    criteria, evidence = _free_text(text, last.start())
    value = _SCORE_VALUE.match(text, last.end())
    if value is None:
        return ParsedReply(None, criteria, evidence, error="'Score:' is not followed by a number")
    number = value.group(1)
    if not number.isdigit() or int(number) > 3:
        return ParsedReply(None, criteria, evidence, error=f"score {number!r} is not one of 0, 1, 2, 3")
    return ParsedReply(int(number), criteria, evidence)


def _free_text(text: str, end: int) -> tuple[str | None, str | None]:
    head = text[:end]
    crit = _CRITERIA_LABEL.search(head)
    evid = _EVIDENCE_LABEL.search(head)
    criteria = evidence = None
    if crit:
        criteria = head[crit.end() : evid.start() if evid and evid.start() > crit.end() else end].strip() or None
    if evid:
        evidence = head[evid.end() :].strip() or None
    return criteria, evidence


def expected_score(tokens: Sequence[str], top_logprobs: Sequence[dict[str, float]]) -> float | None:
    """Σ p(k)·k / 3 over the digits 0–3 at the score position (the last generated digit token), or None.

    Probabilities are renormalised over the four digits: the question asked is "given that a score is written
    here, which one", which is also what the grammar allows at that position.
    """
    for position in range(len(tokens) - 1, -1, -1):
        if tokens[position].strip() in SCORE_DIGITS:
            mass = [0.0] * 4
            for candidate, logprob in top_logprobs[position].items():
                digit = candidate.strip()
                if digit in SCORE_DIGITS and not math.isinf(logprob):
                    mass[int(digit)] += math.exp(logprob)
            total = sum(mass)
            if total <= 0.0:
                return None
            return sum(k * p for k, p in enumerate(mass)) / total / 3.0
    return None
