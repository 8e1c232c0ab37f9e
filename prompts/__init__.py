"""Versioned judge prompts, stored as files: `prompts/<metric>/<version>.<lang>.toml`.

A released file is never edited; a change is a new version. Every judgement records the prompt id
(`metric@version.lang`) and the sha256 of the file it came from.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Collection
from dataclasses import dataclass, fields
from functools import cache
from importlib import resources
from typing import Literal

from prompts.neutralise import neutralise

Mode = Literal["cot", "fast"]

# The version a metric uses when a request names none: check-based prompts where there are (yes/no checks read from
# token probabilities, see juiz.judging.checks; answer relevance's checks-19 scales its item checks by how many key
# points of the judge's own answer from the context the answer states, each read half from the judge and half from
# the share of the point's words the answer uses, weighted by whether a complete answer must state them; it vetoes an
# answer with a sentence that speaks to a grader more than the judge's own points do, and one that only restates the
# question (counted from the words, not asked); its reference and item checks share one system message, so the
# question and context are computed once, and a check asked of one sentence or point asks before it, so only that
# sentence or point is new to the engine; groundedness's checks-8 asks each sentence of the answer beside the context
# segments it is about, in the same layout), else the chain-of-thought juiz-1. Chosen on agreement with the labels at
# the lowest cost (docs/research/). Completeness (checks-3) reads checks-19's key points the same way as a metric of
# its own, in the very same conversations, so grading it beside the default answer relevance costs no conversation
# more; answer relevance checks-15 is checks-14 without them (relevance alone; checks-20 with the restatement veto).
# Requested together, the verdict reads the triad (juiz.agreement.labels.TRIAD_VERDICT).
DEFAULT_VERSIONS = {
    "answer_relevance": "checks-19",
    "groundedness": "checks-8",
    "context_relevance": "juiz-1",
    "completeness": "checks-3",
}
# Beside completeness, answer relevance is relevance alone (checks-20): the key points are completeness's to count,
# and counted twice they would sink a relevant, incomplete answer below P. Same conversations, so no cost.
WITH_COMPLETENESS = {"answer_relevance": "checks-20"}


def default_version(metric: str, metrics: Collection[str] = ()) -> str:
    """The version a metric uses when the request names none, given every metric requested with it."""
    if "completeness" in metrics and metric in WITH_COMPLETENESS:
        return WITH_COMPLETENESS[metric]
    return DEFAULT_VERSIONS[metric]


LANGUAGES = ("en", "pt")
# Where a check's layout places its question and how to answer (PromptTemplate.render_check), if it does.
ASK = "{ask}"


class PromptNotFound(LookupError):
    """No prompt file for this metric, version and language."""


class PromptSchemaError(ValueError):
    """A prompt file whose contents are not a prompt: the message names the file and the key."""


CheckAsk = Literal["once", "per_sentence", "with_reference", "per_point", "counted"]
# Checks asked of no engine: counted from the item's own text (juiz.judging.word_overlap), by name.
COUNTED_CHECKS = ("adds_to_question",)
CheckRole = Literal["veto", "core", "scale", "info"]
YesMeans = Literal["good", "bad"]


@dataclass(frozen=True)
class CheckSpec:
    """One yes/no question of a check-based prompt.

    `ask`: once per item, once per sentence of the answer (`{sentence}` in the question), with the judge's own
    reference answer (`{reference}`), or once per point of that reference (`{point}`: its lines, juiz.judging.checks).
    `role`: a veto can sink the answer alone, core checks make the score, scale checks multiply it
    (juiz.judging.check_rule), info checks are recorded (and may feed a calibration) but do not move the score. `user`
    replaces the item's layout for this check (e.g. the reference before the answer, to ask a comparison in both
    orders; `{ask}` in it places the question, else the question follows it), and `system` the prompt's system
    message. `examples` are worked cases shown before the item as earlier
    turns (the layout's fields and the reply): a small judge's yes/no probabilities on a narrow question are far
    better placed when it has seen both answers given once; they share one prefix across every item, so the engine
    computes them once. `min_words`: the shortest sentence a per-sentence check asks about
    (juiz.judging.sentences.MIN_WORDS
    when unset). `passages`: a per-sentence check that shows, as `{passage}`, only this many context segments, those
    that share the sentence's words (juiz.judging.passages), instead of the whole context. `yes_means`: what a yes says
    of the answer; most checks ask so that yes means good, a few are clearer to this judge the other way round (e.g.
    "does this sentence speak to a grader?"), and their value is P(no) (juiz.judging.check_rule). `baseline`: for a
    per-sentence check, a per-point check asking the same question of the judge's own reference points; the
    sentences are then read against what this judge says of text written for the asker on the same item, in the same
    language (juiz.judging.check_rule). `weighted_by`: for a per-point check, a per-point check whose P(yes) weighs each
    point (e.g. "does a complete answer have to state this point?"). `words_weight`: for a per-point check, how much of
    each point's value is the share of the point's words the answer uses (juiz.judging.word_overlap) instead of the
    judge's P(yes): the two read the same thing with different errors (the small judge misses a point a dense answer
    states; the words miss a paraphrase). `aggregate`: for a per-sentence check, how its sentences combine ("min": the
    weakest decides, as a veto that one bad sentence sinks; "mean"), where it differs from the rule's
    `sentence_aggregate`. A check asked `counted` is no conversation: its yes/no is counted from the item's text, by
    its name (COUNTED_CHECKS; juiz.judging.word_overlap), e.g. whether the answer says more than the question's own
    words."""

    name: str
    question: str
    ask: CheckAsk = "once"
    role: CheckRole = "core"
    user: str | None = None
    system: str | None = None
    examples: tuple[CheckExample, ...] = ()
    min_words: int | None = None
    passages: int | None = None
    yes_means: YesMeans = "good"
    baseline: str | None = None
    weighted_by: str | None = None
    words_weight: float | None = None
    aggregate: Literal["min", "mean"] | None = None

    @property
    def shares_item_prefix(self) -> bool:
        """Whether this check's conversation starts with the prompt's own system message and item layout."""
        return self.system is None and not self.examples


@dataclass(frozen=True)
class CheckExample:
    """A worked case of a check: the layout's fields (e.g. question, sentence) and the reply it should get."""

    fields: tuple[tuple[str, str], ...]
    reply: str


@dataclass(frozen=True)
class CheckRule:
    """How a check-based prompt's checks become a 0–3 score and an expected score (juiz.judging.check_rule)."""

    version: str
    veto_below: float  # a veto check whose P(yes) is below this sinks the answer to 0
    cuts: tuple[float, float, float]  # the core checks' mean P(yes) at or above cut k gives score k + 1
    sentence_aggregate: Literal["min", "mean"]  # how a per-sentence check's P(yes) over the sentences enters
    # how a per-point check's P(yes) over the reference's points enters
    point_aggregate: Literal["min", "mean"] = "mean"
    # the expected score: the strength itself (rules before rule-6), or the strength placed between the cuts on the
    # score's own 0–1 scale, so that it falls in the same class as the score (juiz.judging.check_rule.banded)
    expected: Literal["strength", "banded"] = "strength"
    # a check read against a baseline (CheckSpec.baseline) sinks the answer when its sentences' flag exceeds the
    # baseline's by more than this (juiz.judging.check_rule)
    baseline_margin: float = 0.0


@dataclass(frozen=True)
class PromptTemplate:
    metric: str
    version: str
    lang: str
    description: str
    system: str
    user: str
    reply_cot: str
    reply_fast: str
    sha256: str
    # Check-based prompts (kind "checks"): yes/no questions read from token probabilities instead of a written grade.
    kind: Literal["score", "checks"] = "score"
    reply_check: str = ""  # appended after each check's question: how to answer (one word)
    checks: tuple[CheckSpec, ...] = ()
    rule: CheckRule | None = None
    reference: str = ""  # with `with_reference` checks: how the judge writes its own answer from the context
    user_reference: str = ""  # the item's layout for that request (a prefix of `user`, so its KV cache is shared)
    system_reference: str = ""  # that request's own system message (else the prompt's: then the prefix is shared)
    reference_max_tokens: int = 96

    @property
    def id(self) -> str:
        return f"{self.metric}@{self.version}.{self.lang}"

    def render(self, *, mode: Mode = "cot", **fields: str) -> list[dict[str, str]]:
        """Chat messages for the model's own chat template; user text is data between tags, never markup.

        `fields` fill the template's placeholders: question, answer, context (all segments, see
        `format_context`), segment (one segment's text), as the metric's template asks.
        """
        tags = set(re.findall(r"</(\w+)>", self.user))
        values = {name: _neutralise(text, tags) for name, text in fields.items()}
        reply = self.reply_cot if mode == "cot" else self.reply_fast
        return [
            {"role": "system", "content": self.system},
            {"role": "user", "content": self.user.format_map(values) + "\n\n" + reply},
        ]

    def render_check(self, check: CheckSpec, **fields: str) -> list[dict[str, str]]:
        """One check's conversation: the item (the check's own layout or the prompt's), its question, how to answer.

        Every check of an item starts with the same system message and item text, so the engine's prefix cache
        computes the item once for all of its checks. A check with its own system message or worked examples shows
        those first instead. The question and how to answer follow the layout, or stand where it writes `{ask}`: put
        before the one sentence or point a conversation asks about, they are shared by all of an item's
        conversations of that check, and only the sentence or point is each one's own."""
        layout = check.user or self.user
        tags = set(re.findall(r"</(\w+)>", layout + check.question))

        def content(values: dict[str, str]) -> str:
            neutral = {name: _neutralise(text, tags) for name, text in values.items()}
            ask = check.question.format_map(neutral) + "\n" + self.reply_check
            if ASK in layout:  # the layout places the question itself, e.g. before the one sentence it asks about
                return layout.format_map({**neutral, "ask": ask})
            return layout.format_map(neutral) + "\n\n" + ask

        shown: list[dict[str, str]] = []
        for example in check.examples:
            shown += [
                {"role": "user", "content": content(dict(example.fields))},
                {"role": "assistant", "content": example.reply},
            ]
        return [
            {"role": "system", "content": check.system or self.system},
            *shown,
            {"role": "user", "content": content(fields)},
        ]

    def render_reference(self, **fields: str) -> list[dict[str, str]]:
        """The request for the judge's own short answer from the context (shared by every answer to the question)."""
        tags = set(re.findall(r"</(\w+)>", self.user_reference))
        values = {name: _neutralise(text, tags) for name, text in fields.items()}
        content = self.user_reference.format_map(values) + "\n\n" + self.reference
        return [
            {"role": "system", "content": self.system_reference or self.system},
            {"role": "user", "content": content},
        ]


def format_context(segments: list[str]) -> str:
    """The context as the groundedness prompt shows it: numbered segments, so the judge can cite them as [n]."""
    return "\n\n".join(f"[{n}] {text.strip()}" for n, text in enumerate(segments, start=1))


def _neutralise(text: str, tags: set[str]) -> str:
    """User text as data: no prompt delimiter and no model special token in any variant (prompts.neutralise)."""
    return neutralise(text, tags)


def parse_prompt_id(prompt_id: str) -> tuple[str, str, str | None]:
    """`answer_relevance@juiz-1` or `answer_relevance@juiz-1.pt` → (metric, version, lang or None)."""
    match = re.fullmatch(r"([a-z_]+)@([\w\-]+)(?:\.([a-z]{2}))?", prompt_id)
    if not match:
        raise PromptNotFound(
            f"malformed prompt id {prompt_id!r} (expected metric@version, e.g. answer_relevance@juiz-1)"
        )
    return match.group(1), match.group(2), match.group(3)


@cache
def load(metric: str, version: str, lang: str) -> PromptTemplate:
    folder = resources.files(__package__) / metric
    file = folder / f"{version}.{lang}.toml"
    if not file.is_file():
        known = ", ".join(available()) or "none"
        raise PromptNotFound(f"no prompt {metric}@{version}.{lang}; available: {known}")
    raw = file.read_bytes()
    data = tomllib.loads(raw.decode("utf-8"))
    common = {
        "metric": data["metric"],
        "version": data["version"],
        "lang": data["lang"],
        "description": data["description"],
        "system": data["system"],
        "user": data["user"],
        "sha256": hashlib.sha256(raw).hexdigest(),
    }
    if data.get("kind", "score") == "score":
        return PromptTemplate(**common, reply_cot=data["reply_cot"], reply_fast=data["reply_fast"])
    rule = _check_rule(data.get("rule"), f"{metric}/{file.name}: rule")
    checks = tuple(_check_spec(c, f"{metric}/{file.name}: checks[{n}]") for n, c in enumerate(data["checks"]))
    return PromptTemplate(
        **common,
        reply_cot="",
        reply_fast="",
        kind="checks",
        reply_check=data["reply_check"],
        checks=_linked(checks, rule, f"{metric}/{file.name}: checks"),
        rule=rule,
        reference=data.get("reference", ""),
        user_reference=data.get("user_reference", ""),
        system_reference=data.get("system_reference", ""),
        reference_max_tokens=int(data.get("reference_max_tokens", 96)),
    )


_RULE_CHOICES = {
    "sentence_aggregate": ("min", "mean"),
    "point_aggregate": ("min", "mean"),
    "expected": ("strength", "banded"),
}


def template_for(prompt_id: str | None) -> PromptTemplate | None:
    """The prompt a result records (`provenance.prompt`), or None when there is none or it is unknown here."""
    if prompt_id is None:
        return None
    try:
        metric, version, lang = parse_prompt_id(prompt_id)
        return load(metric, version, lang or "en")
    except PromptNotFound:
        return None


def _check_rule(raw: object, where: str) -> CheckRule:
    """The `[rule]` table as a CheckRule; PromptSchemaError naming the key when it is not one."""
    if not isinstance(raw, dict):
        raise PromptSchemaError(f"{where}: a check-based prompt needs a [rule] table")
    if unknown := sorted(set(raw) - {f.name for f in fields(CheckRule)}):
        raise PromptSchemaError(f"{where}: unknown key(s) {', '.join(unknown)}")
    if missing := [k for k in ("version", "veto_below", "cuts", "sentence_aggregate") if k not in raw]:
        raise PromptSchemaError(f"{where}: missing key(s) {', '.join(missing)}")
    for key, choices in _RULE_CHOICES.items():
        if key in raw and raw[key] not in choices:
            raise PromptSchemaError(f"{where}.{key} must be one of {', '.join(choices)}, not {raw[key]!r}")
    cuts = raw["cuts"]
    if not (isinstance(cuts, list) and len(cuts) == 3 and all(isinstance(c, int | float) for c in cuts)):
        raise PromptSchemaError(f"{where}.cuts must be three numbers, not {cuts!r}")
    return CheckRule(
        version=str(raw["version"]),
        veto_below=float(raw["veto_below"]),
        cuts=(float(cuts[0]), float(cuts[1]), float(cuts[2])),
        sentence_aggregate=raw["sentence_aggregate"],
        point_aggregate=raw.get("point_aggregate", "mean"),
        expected=raw.get("expected", "strength"),
        baseline_margin=float(raw.get("baseline_margin", 0.0)),
    )


def _linked(checks: tuple[CheckSpec, ...], rule: CheckRule, where: str) -> tuple[CheckSpec, ...]:
    """The checks, once every `baseline` (of a per-sentence check) and `weighted_by` (of a per-point check) names a
    per-point check of the same prompt, and a baseline has the rule's margin to be read against; PromptSchemaError
    naming the check otherwise."""
    per_point = {c.name for c in checks if c.ask == "per_point"}
    if rule.baseline_margin <= 0 and (read := [c.name for c in checks if c.baseline]):
        raise PromptSchemaError(f"{where}: {', '.join(read)} has a baseline: the rule needs a baseline_margin > 0")
    for check in checks:
        if check.ask == "counted" and check.name not in COUNTED_CHECKS:
            raise PromptSchemaError(
                f"{where}: {check.name} is asked counted, but only {', '.join(COUNTED_CHECKS)} can be counted"
            )
        for key, asked, other in (
            ("baseline", "per_sentence", check.baseline),
            ("weighted_by", "per_point", check.weighted_by),
        ):
            if other is None:
                continue
            if check.ask != asked:
                raise PromptSchemaError(f"{where}: {check.name}.{key} is for a check asked {asked}")
            if other not in per_point:
                raise PromptSchemaError(
                    f"{where}: {check.name}.{key} names {other!r}, which is no per-point check here"
                )
        if check.aggregate is not None:
            if check.ask != "per_sentence":
                raise PromptSchemaError(f"{where}: {check.name}.aggregate is for a check asked per_sentence")
            if check.aggregate not in _RULE_CHOICES["sentence_aggregate"]:
                raise PromptSchemaError(
                    f'{where}: {check.name}.aggregate must be "min" or "mean", not {check.aggregate!r}'
                )
        if check.words_weight is not None:
            if check.ask != "per_point":
                raise PromptSchemaError(f"{where}: {check.name}.words_weight is for a check asked per_point")
            weight = check.words_weight
            if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 < weight < 1:
                raise PromptSchemaError(
                    f"{where}: {check.name}.words_weight must be a number between 0 and 1, not {weight!r}"
                )
    return checks


def _check_spec(raw: dict[str, object], where: str) -> CheckSpec:
    """A check's table as a CheckSpec; PromptSchemaError naming the key when it is not one."""
    examples = raw.pop("examples", [])
    if not isinstance(examples, list) or not all(isinstance(e, dict) and "reply" in e for e in examples):
        raise PromptSchemaError(f"{where}.examples must be a list of tables, each with a reply")
    unknown = sorted(set(raw) - {f.name for f in fields(CheckSpec)})
    if unknown:
        raise PromptSchemaError(f"{where}: unknown key(s) {', '.join(unknown)}")
    if raw.get("yes_means", "good") not in ("good", "bad"):
        raise PromptSchemaError(f'{where}.yes_means must be "good" or "bad", not {raw["yes_means"]!r}')
    return CheckSpec(
        **raw,  # type: ignore[arg-type]
        examples=tuple(
            CheckExample(
                fields=tuple((k, str(v)) for k, v in example.items() if k != "reply"), reply=str(example["reply"])
            )
            for example in examples
        ),
    )


def kind(metric: str, version: str) -> str:
    """A version's kind ("score" or "checks"), the same in every language it exists in."""
    for lang in LANGUAGES:
        try:
            return load(metric, version, lang).kind
        except PromptNotFound:
            continue
    raise PromptNotFound(f"no prompt {metric}@{version} in any language; available: {', '.join(available())}")


def available() -> list[str]:
    """Every prompt id on disk, e.g. answer_relevance@juiz-1.pt."""
    ids = []
    for metric_dir in resources.files(__package__).iterdir():
        if metric_dir.is_dir() and not metric_dir.name.startswith("_"):
            for file in metric_dir.iterdir():
                if file.name.endswith(".toml"):
                    version, lang = file.name.removesuffix(".toml").rsplit(".", 1)
                    ids.append(f"{metric_dir.name}@{version}.{lang}")
    return sorted(ids)


@cache
def check_reply_instructions() -> frozenset[str]:
    """Every check prompt's reply instruction ("Reply with one word: Yes or No." and its translations)."""
    replies = set()
    for prompt_id in available():
        metric, version, lang = parse_prompt_id(prompt_id)
        template = load(metric, version, lang or "en")
        if template.kind == "checks":
            replies.add(template.reply_check.strip())
    return frozenset(replies)


def asks_yes_no(text: str) -> bool:
    """Whether a conversation's text is a check's one-token question: it holds a check prompt's reply instruction,
    wherever the prompt's layout puts it (after the question, or before the sentence or point it asks about)."""
    return any(reply in text for reply in check_reply_instructions())
