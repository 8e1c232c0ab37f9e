"""Check-based grading (prompts of kind "checks"): one item's metric as a set of yes/no conversations.

A check-based prompt asks narrow questions, each answered with one token, and reads P(yes) from the probabilities of
the yes and no tokens (`GenerationRequest.word_groups`; the in-process engine reads them by token id, never from a
truncated top-k). Checks may be asked per sentence of the answer (juiz.judging.sentences), against a reference the
judge first
writes itself from the context (one greedy reply per distinct question and context), or per point of that reference
(its lines): "does the answer state this point?", which tells a complete answer from one that gives a part.

Every check of an item starts with the same system message and item text, so with the engine's prefix cache an
item's K checks cost about one prefill. That only holds if the item's prefix is cached before its checks are
scheduled: requests scheduled in the same step all compute it. So the judge sends the references first (which share
the item's prefix up to the context when written under the prompt's own system message), then every check in one call,
each item's first check at its head and the rest after (`Judge`). Info checks the rule never reads are asked only when
a calibration reads them (`rule_reads`).
`juiz.judging.check_rule` turns the results into a grade.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import prompts
from juiz.engines.base import Completion, Conversation, GenerationRequest
from juiz.judging.passages import passage_for
from juiz.judging.sentences import MIN_WORDS, split_sentences
from schemas.judgement import CheckResult, CheckStatus

# Yes and no in every language juiz has prompts for: a Portuguese prompt's "Sim"/"Não" read as yes/no.
YES_NO: tuple[tuple[str, ...], ...] = (("yes", "sim"), ("no", "não", "nao"))
CHECK_REQUEST = GenerationRequest(max_tokens=1, logprobs=0, word_groups=YES_NO)
# Below this P(yes) + P(no) the judge was not answering yes or no (it started some other word): the check is not read.
MIN_MASS = 0.25
REFERENCE_MAX_CHARS = 1200
# A reference's points: its lines (list markers dropped) of at least this many words, the first MAX_POINTS of them.
POINT_MIN_WORDS = 3
MAX_POINTS = 4
# How an item's checks are asked, beyond what the prompt file says: the sentence splitter (juiz.judging.sentences), the
# passage beside a sentence (juiz.judging.passages), a reference's points. Every check-based result records it in its
# sampling,
# so the result cache never serves a grade asked the old way as one asked the new way: bump it when any of them
# changes what a check sees. 2: legal citations ("art. 49") no longer end a sentence. 3: a sentence too short to be
# asked on its own joins its neighbour instead of being dropped (a two-word answer is one sentence).
ASKING_VERSION = 3
# The ways of asking that need the judge's reference: they can be planned only once it is written.
REFERENCE_ASKS = ("with_reference", "per_point")


def rule_reads(template: prompts.PromptTemplate) -> set[str]:
    """The checks the rule reads: every check but the info ones, and an info check another check reads through it (a
    baseline, a point's weight). The others are asked only when something else reads them (a calibration)."""
    read = {c.name for c in template.checks if c.role != "info"}
    return read | {n for c in template.checks for n in (c.baseline, c.weighted_by) if n is not None}


def info_only(template: prompts.PromptTemplate) -> list[str]:
    """The info checks the rule never reads (`rule_reads`), in the prompt's order."""
    read = rule_reads(template)
    return [c.name for c in template.checks if c.name not in read]


@dataclass(frozen=True)
class Ask:
    """One check's conversation for one item (and one sentence, for per-sentence checks)."""

    check: prompts.CheckSpec
    target: str | None
    conversation: Conversation
    # Asks with equal keys start with the same tokens: the item's (system message and layout), or, for a check with
    # its own system message or worked examples, that check's shared opening.
    prefix_key: tuple[object, ...]


@dataclass
class CheckJob:
    """One item's metric graded by a check-based prompt."""

    item: int
    metric: str
    template: prompts.PromptTemplate
    fields: dict[str, str]
    # The answer's sentences by the shortest sentence asked on its own (a check's `min_words`).
    sentences: dict[int, list[str]] = field(default_factory=dict)
    # The context's segments, for checks that show a sentence beside the segments it is about (`passages`).
    segments: list[str] = field(default_factory=list)
    # Whether the info checks the rule never reads are asked (a calibration reading them needs them); each costs a
    # conversation.
    info_checks: bool = True

    @classmethod
    def plan(
        cls,
        item: int,
        metric: str,
        template: prompts.PromptTemplate,
        fields: dict[str, str],
        segments: list[str] | None = None,
        info_checks: bool = True,
    ) -> CheckJob:
        shortest = {c.min_words or MIN_WORDS for c in template.checks if c.ask == "per_sentence"}
        sentences = {n: split_sentences(fields["answer"], n) for n in sorted(shortest)}
        return cls(item, metric, template, fields, sentences, list(segments or []), info_checks)

    @property
    def checks(self) -> list[prompts.CheckSpec]:
        """The checks this job asks: the prompt's, less the info checks the rule never reads unless they are wanted."""
        if self.info_checks:
            return list(self.template.checks)
        read = rule_reads(self.template)
        return [c for c in self.template.checks if c.name in read]

    @property
    def prefix_key(self) -> tuple[object, ...]:
        """Jobs with equal keys start their checks with the same tokens (same item, system message and layout)."""
        first = self.template.checks[0]
        return (self.item, self.template.system, first.user or self.template.user)

    @property
    def needs_reference(self) -> bool:
        return any(c.ask in REFERENCE_ASKS for c in self.checks)

    @property
    def reference_request(self) -> GenerationRequest:
        """The judge's own answer from the context: greedy, as long as the prompt allows, stopped once it holds every
        point the checks read."""
        return GenerationRequest(max_tokens=self.template.reference_max_tokens, logprobs=0, enough=has_every_point)

    @property
    def reference_shares_prefix(self) -> bool:
        """Whether writing the reference caches this item's prefix (same system message; the layout's start)."""
        return self.needs_reference and not self.template.system_reference

    def reference_conversation(self) -> Conversation:
        fields = {k: v for k, v in self.fields.items() if k != "answer"}
        return self.template.render_reference(**fields)

    def _prefix_key(self, check: prompts.CheckSpec) -> tuple[object, ...]:
        if check.shares_item_prefix:
            return self.prefix_key
        return (self.template.id, check.name, check.system, check.examples)

    def _sentences_for(self, check: prompts.CheckSpec) -> list[str]:
        """The answer's sentences as this check asks them (shorter ones than it asks about joined to a neighbour)."""
        return self.sentences.get(check.min_words or MIN_WORDS, [])

    def asks(
        self, reference: str | None, no_reference: str = "no reference answer"
    ) -> tuple[list[Ask], list[CheckResult]]:
        """The conversations to generate, and the checks that can't be asked (no reference: `no_reference` says why,
        e.g. the reference's request was cancelled) as failed results."""
        asks: list[Ask] = []
        unasked: list[CheckResult] = []
        for check in self.checks:
            key = self._prefix_key(check)
            if check.ask == "counted":  # counted from the text when the result is read, never asked
                continue
            if check.ask == "per_sentence":
                for sentence in self._sentences_for(check):
                    shown = dict(self.fields, sentence=sentence)
                    if check.passages:
                        shown["passage"] = passage_for(sentence, self.segments, check.passages)
                    conversation = self.template.render_check(check, **shown)
                    asks.append(Ask(check, sentence, conversation, key))
            elif check.ask in REFERENCE_ASKS:
                asks_, unasked_ = self._reference_asks(check, key, reference, no_reference)
                asks += asks_
                unasked += unasked_
            else:
                asks.append(Ask(check, None, self.template.render_check(check, **self.fields), key))
        return asks, unasked

    def _reference_asks(
        self, check: prompts.CheckSpec, key: tuple[object, ...], reference: str | None, no_reference: str
    ) -> tuple[list[Ask], list[CheckResult]]:
        """A check asked with the judge's reference (once) or of each of its points; failed when there is none."""
        if reference is None:
            return [], [_result(check, None, status=CheckStatus.FAILED, error=no_reference)]
        if check.ask == "with_reference":
            return [
                Ask(check, reference, self.template.render_check(check, **self.fields, reference=reference), key)
            ], []
        points = reference_points(reference)
        if not points:
            error = f"the reference answer has no point of {POINT_MIN_WORDS} words or more: {reference!r}"
            return [], [_result(check, None, status=CheckStatus.FAILED, error=error)]
        return [Ask(check, p, self.template.render_check(check, **self.fields, point=p), key) for p in points], []


def _result(check: prompts.CheckSpec, target: str | None, **values: object) -> CheckResult:
    fields = {"name": check.name, "question": check.question, "role": check.role, "yes_means": check.yes_means}
    return CheckResult.model_validate({**fields, "target": target, **values})


def read_check(ask: Ask, completion: Completion) -> CheckResult:
    """A check's result from its one-token reply: P(yes) normalised over yes + no, or why it could not be read."""
    if completion.error is not None:
        return _result(ask.check, ask.target, status=CheckStatus.FAILED, error=completion.error)
    if completion.word_probs is None:
        return _result(
            ask.check, ask.target, status=CheckStatus.FAILED, error="the engine returned no yes/no probabilities"
        )
    yes, no = completion.word_probs[0], completion.word_probs[1]
    mass = min(1.0, yes + no)
    if mass < MIN_MASS:
        return _result(
            ask.check,
            ask.target,
            status=CheckStatus.LOW_MASS,
            mass=round(mass, 6),
            error=f"the judge answered neither yes nor no (P(yes)+P(no) = {mass:.3f} < {MIN_MASS}): "
            f"it began {completion.text!r}",
        )
    return _result(ask.check, ask.target, status=CheckStatus.OK, p_yes=round(yes / (yes + no), 6), mass=round(mass, 6))


def reference_points(reference: str) -> list[str]:
    """The points of a reference written as a list: one per line, list markers dropped, trivial lines skipped."""
    points = []
    for line in reference.splitlines():
        point = re.sub(r"^\s*(?:[-*•]|\d+[.)])\s*", "", line).strip()
        if len(point.split()) >= POINT_MIN_WORDS:
            points.append(point)
    return points[:MAX_POINTS]


def has_every_point(reply: str) -> bool:
    """Whether a reference being written holds every point the checks will read: MAX_POINTS of them on complete
    lines (a line is complete once the next one has begun)."""
    complete, _, _ = reply[:REFERENCE_MAX_CHARS].rpartition("\n")
    return len(reference_points(complete)) >= MAX_POINTS


def reference_text(completion: Completion) -> str | None:
    """The judge's reference answer, or None when it could not be written."""
    text = completion.text.strip()[:REFERENCE_MAX_CHARS]
    return text if completion.error is None and text else None
