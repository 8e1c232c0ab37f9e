"""Versioned judge prompts, stored as files: `prompts/<metric>/<version>.<lang>.toml`.

A released file is never edited; a change is a new version. Every judgement records the prompt id
(`metric@version.lang`) and the sha256 of the file it came from.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

from prompts.neutralise import neutralise

Mode = Literal["cot", "fast"]

# The version a metric uses when a request names none. juiz-1 discriminates better than the faithful TruLens
# version with small judges (see README, "Prompt versions").
DEFAULT_VERSIONS = {"answer_relevance": "juiz-1", "groundedness": "juiz-1", "context_relevance": "juiz-1"}
LANGUAGES = ("en", "pt")


class PromptNotFound(LookupError):
    """No prompt file for this metric, version and language."""


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
    return PromptTemplate(
        metric=data["metric"],
        version=data["version"],
        lang=data["lang"],
        description=data["description"],
        system=data["system"],
        user=data["user"],
        reply_cot=data["reply_cot"],
        reply_fast=data["reply_fast"],
        sha256=hashlib.sha256(raw).hexdigest(),
    )


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
