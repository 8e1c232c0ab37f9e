"""A FAKE judge engine for unit tests and the fake worker: replies from a function of the conversation, no model.

Named as such everywhere it is used; nothing on the default path ever falls back to it.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping, Sequence

from juiz.engines.base import CANCELLED, IN_PROCESS, CallControl, Completion, Conversation, GenerationRequest, aborted


class FakeEngine:
    """A FAKE engine for unit tests: replies from a function of the conversation, no model involved.

    `reply` gets the rendered conversation and returns the reply text; the score digit (if any) gets a made-up
    probability distribution so expected-score code paths are exercised. It honours `CallControl` as the real engine
    does, between conversations: past the deadline the rest time out; indices `cancelled()` returns are aborted; a
    conversation's tokens go to `on_tokens` one by one and the conversation to `on_finished` as it is done.
    `conversation_s`: the time each conversation takes, slept (0: none), so a test sees a call's progress move before
    it returns.
    """

    def __init__(
        self,
        reply: Callable[[Conversation], str],
        model_id: str = "fake-engine",
        origin: Mapping[str, str] = IN_PROCESS,
        conversation_s: float = 0.0,
    ) -> None:
        self._reply = reply
        self._model_id = model_id
        # What results record about the engine: nothing by default; a test may give it vLLM's, e.g. its dtype.
        self.origin = origin
        self.conversation_s = conversation_s
        self.calls: list[int] = []  # batch sizes seen, so tests can check batching

    @property
    def model_id(self) -> str:
        return self._model_id

    def close(self) -> None:
        """Nothing to let go; the real engines' close stops processes or connections, and callers close any engine."""

    def generate(
        self, conversations: Sequence[Conversation], request: GenerationRequest, control: CallControl | None = None
    ) -> list[Completion]:
        self.calls.append(len(conversations))
        started = next_poll = time.monotonic()
        cancelled: set[int] = set()
        completions = []
        for index, conversation in enumerate(conversations):
            now = time.monotonic()
            if control is not None and control.deadline is not None and now >= control.deadline:
                completions.append(control.timed_out(started))
                control.finished(index)
                continue
            if control is not None and control.cancelled is not None and now >= next_poll:
                cancelled = set(control.cancelled())
                next_poll = now + control.poll_s
            if index in cancelled:
                completions.append(aborted(CANCELLED))
            else:
                if self.conversation_s:
                    time.sleep(self.conversation_s)
                completions.append(self._sampled(conversation, request))
                if control is not None:
                    self._report_tokens(control, index, conversation, completions[-1])
            if control is not None:
                control.finished(index)
        return completions

    @staticmethod
    def _report_tokens(control: CallControl, index: int, conversation: Conversation, completion: Completion) -> None:
        """The prompt read (its words stand in for tokens), then each reply token as if written one by one: a
        listener sees a conversation's tokens move before it finishes, as a streaming engine shows them."""
        control.tokens(index, 0, sum(len(message["content"].split()) for message in conversation))
        for reply in (completion, *completion.alternatives):
            for _ in reply.tokens:
                control.tokens(index, 1)

    def _sampled(self, conversation: Conversation, request: GenerationRequest) -> Completion:
        """n replies (GenerationRequest.n): `reply` is asked n times, so a test's reply function can vary them."""
        first = self._complete(conversation, request)
        first.alternatives = [self._complete(conversation, request) for _ in range(request.n - 1)]
        return first

    @staticmethod
    def _word_probs(text: str, groups: tuple[tuple[str, ...], ...]) -> tuple[float, ...]:
        """A reply `p=0.8` puts 0.8 on the first group and the rest on the second; a reply that is one of a group's
        words puts 0.9 on that group; anything else reads as no mass on any group."""
        if text.startswith("p="):
            p = float(text[2:])
            return (p, 1.0 - p, *[0.0] * (len(groups) - 2))
        probs = [0.0] * len(groups)
        for index, words in enumerate(groups):
            if text.strip().casefold() in {w.casefold() for w in words}:
                probs = [0.1 / max(1, len(groups) - 1)] * len(groups)
                probs[index] = 0.9
        return tuple(probs)

    def _complete(self, conversation: Conversation, request: GenerationRequest) -> Completion:
        text = self._reply(conversation)
        if request.word_groups:
            probs = self._word_probs(text, request.word_groups)
            return Completion(text=text, tokens=[text], top_logprobs=[{}], finish_reason="length", word_probs=probs)
        tokens = re.findall(r"\d|\D+", text)
        top = [{tok: 0.0} for tok in tokens]
        for i in range(len(tokens) - 1, -1, -1):
            if tokens[i] in "0123":
                k = int(tokens[i])
                top[i] = {str(d): math.log(0.7 if d == k else 0.1) for d in range(4)}
                break
        return Completion(text=text, tokens=tokens, top_logprobs=top, finish_reason="stop")
