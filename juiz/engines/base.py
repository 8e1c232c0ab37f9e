"""Judge engines: one small Protocol (`JudgeEngine`) and the types a call speaks in.

A call takes conversations and one `GenerationRequest` (the sampling, the same for all of them) and returns one
`Completion` per conversation; a `CallControl` bounds it (deadline, cancel). The back ends are adapters of their own:
`juiz.engines.vllm_engine.VLLMEngine` (vLLM in process), `juiz.engines.openai_server.OpenAIEngine` (any
OpenAI-compatible server),
and `juiz.engines.fake.FakeEngine`, a fake for unit tests that nothing on the default path ever falls back to.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

Message = dict[str, str]
Conversation = list[Message]
# A fake engine in this process records no origin; vLLM in process records only its dtype (Provenance.engine_dtype).
IN_PROCESS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)
class GenerationRequest:
    """Sampling for one call; the same for every conversation in it."""

    max_tokens: int
    regex: str | None = None  # reply format enforced by structured outputs
    grammar: str | None = None  # the same format as `regex` in llama.cpp's GBNF, for engines that take no regex
    choice: tuple[str, ...] | None = None  # or: the reply is exactly one of these
    logprobs: int = 20  # top-k log-probabilities per generated token
    temperature: float = 0.0
    n: int = 1  # replies drawn per conversation (vLLM's SamplingParams.n); replies 2..n in Completion.alternatives
    # Read the probability of each group of words at the first reply token (e.g. (("yes", "sim"), ("no", "não"))):
    # Completion.word_probs. The in-process engine reads them by token id, whatever the top-k holds.
    word_groups: tuple[tuple[str, ...], ...] = ()
    # The reply is complete once this holds of its text so far: the caller reads no further (the judge's reference
    # stops at its last point instead of writing points it drops). The reply's first part is the same either way, so
    # it is not part of what results record; an engine that can't stop a reply early returns it whole.
    enough: Callable[[str], bool] | None = field(default=None, compare=False, repr=False)

    def describe(self) -> dict[str, Any]:
        """What goes into each result's provenance."""
        return {
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "structured_output": "regex" if self.regex else ("choice" if self.choice else None),
            "logprobs": self.logprobs,
            **({"n": self.n} if self.n > 1 else {}),  # absent for one reply: older provenance and cache keys hold
            **({"word_groups": [list(g) for g in self.word_groups]} if self.word_groups else {}),
        }


def spellings(word: str) -> list[str]:
    """The forms a reply may start with: as written, capitalised, upper case, each with and without a leading space."""
    forms = dict.fromkeys(f for w in (word, word.capitalize(), word.upper()) for f in (w, " " + w))
    return list(forms)


def group_probs_from_text(candidates: dict[str, float], groups: Sequence[Sequence[str]]) -> tuple[float, ...]:
    """Each group's probability from one position's {token text: log-probability}: the sum over the tokens whose text
    (blanks stripped, case folded) is one of the group's words. Tokens of no group add nothing."""
    wanted = [{w.casefold() for w in group} for group in groups]
    sums = [0.0] * len(groups)
    for text, logprob in candidates.items():
        key = text.strip().casefold()
        for index, words in enumerate(wanted):
            if key in words:
                sums[index] += math.exp(logprob)
                break
    return tuple(min(1.0, s) for s in sums)


@dataclass
class Completion:
    text: str
    tokens: list[str] = field(default_factory=list)
    # top_logprobs[i] maps candidate token text → log-probability at generated position i.
    top_logprobs: list[dict[str, float]] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    # The reply's length in tokens as the engine counted it (`tokens` is empty when no log-probabilities were asked).
    reply_tokens: int = 0
    error: str | None = None  # set when this one conversation could not be generated
    alternatives: list[Completion] = field(default_factory=list)  # replies 2..n when GenerationRequest.n > 1
    # With GenerationRequest.word_groups: each group's probability at the first reply token; None when not read.
    word_probs: tuple[float, ...] | None = None


CANCELLED = "cancelled"


@dataclass
class CallControl:
    """Bounds one engine call. Aborted conversations come back as `Completion(error=..., finish_reason="abort")`."""

    deadline: float | None = None  # a time.monotonic() value; requests still running then are aborted
    cancelled: Callable[[], Collection[int]] | None = None  # indices (into this call's conversations) to abort now
    poll_s: float = 0.5  # how often `cancelled` is asked
    # Called once per conversation index, as that conversation's completion is final (a reply, an error or an abort),
    # from the thread that called `generate`: progress that moves while a long call runs.
    on_finished: Callable[[int], None] | None = None
    # Called as a conversation's work grows, with the tokens new since its last report: (index, reply tokens written,
    # prompt tokens read, i.e. computed rather than served from a prefix cache), from the thread that called
    # `generate`. A long reply reports as it is written (where the engine streams it), a prompt as it is read (where
    # the engine reports that: llama.cpp, once a step); the rest reports once, as it finishes, before `on_finished`:
    # progress that moves within a long conversation.
    on_tokens: Callable[[int, int, int], None] | None = None

    def finished(self, index: int) -> None:
        if self.on_finished is not None:
            self.on_finished(index)

    def tokens(self, index: int, written: int, read: int = 0) -> None:
        if self.on_tokens is not None and (written or read):
            self.on_tokens(index, written, read)

    def timed_out(self, started: float) -> Completion:
        budget = max(0.0, (self.deadline or started) - started)
        return aborted(f"timed out after {budget:.0f} s")

    def subset(self, positions: Sequence[int]) -> CallControl:
        """This control for a call over some of its items: item i of that call is item positions[i] here."""
        subset = self
        if self.on_finished is not None:
            told = self.on_finished
            subset = replace(subset, on_finished=lambda i: told(positions[i]))
        if self.on_tokens is not None:
            grew = self.on_tokens
            subset = replace(subset, on_tokens=lambda i, written, read: grew(positions[i], written, read))
        if self.cancelled is None:
            return subset
        whole = self.cancelled
        at = {position: i for i, position in enumerate(positions)}

        def cancelled() -> Collection[int]:
            return [at[p] for p in whole() if p in at]

        return replace(subset, cancelled=cancelled)


def aborted(reason: str) -> Completion:
    return Completion(text="", error=reason, finish_reason="abort")


@runtime_checkable
class JudgeEngine(Protocol):
    """What a judge needs from a model server."""

    @property
    def model_id(self) -> str: ...

    @property
    def origin(self) -> Mapping[str, str]:
        """Where and how it grades, copied into every result's provenance (`engine` and `engine_host` for a judge
        server, `engine_dtype` for vLLM in process; IN_PROCESS, nothing, for a fake)."""
        ...

    def generate(
        self, conversations: Sequence[Conversation], request: GenerationRequest, control: CallControl | None = None
    ) -> list[Completion]:
        """One completion per conversation, in order, generated as one batch; `control` may abort some or all.

        A conversation that can't be generated (too long for the model, rejected by the engine) comes back with its
        own `error`; raises `EngineDeadError` when the engine can't serve anything any more.
        """
        ...
