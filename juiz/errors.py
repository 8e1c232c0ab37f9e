"""Every error juiz raises on purpose. Catch `JuizError` to catch them all.

JuizError
├── InputError            bad user input: a file, line/item and field are named (CLI exit 2, HTTP 4xx)
├── PromptError           a prompt id or prompt file that does not exist or does not render
├── ModelError            a model path that is missing or not loadable, a model that was never pulled
└── EngineError           the judge engine failed as a whole (the items are marked `failed`)
    ├── TransientEngineError   worth retrying later (connection refused, timeout)
    └── EngineDeadError        the engine can't serve any request any more (its process died): stop the worker
"""

from __future__ import annotations


class JuizError(Exception):
    """Base of everything juiz raises on purpose."""


class InputError(JuizError):
    """User input that can't be read. Says where: source (file or "body"), line or item index, field."""

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None, field: str | None = None):
        self.message = message
        self.source = source
        self.line = line
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ":".join(str(p) for p in (self.source, self.line) if p is not None)
        field = f" field '{self.field}'" if self.field else ""
        return f"{where}{field}: {self.message}" if (where or field) else self.message


class PromptError(JuizError):
    """A prompt id that is not known, or a prompt file that is malformed."""


class ModelError(JuizError):
    """A model that can't be found or loaded; the message names the path or id."""


class EngineError(JuizError):
    """The engine failed for a whole call."""


class TransientEngineError(EngineError):
    """An engine failure worth retrying (a remote server down or slow)."""


class EngineDeadError(EngineError):
    """The engine can't serve any request any more (vLLM's EngineDeadError, a dead engine process).

    Never isolated per item: the worker puts its work back on the queue and exits so a fresh one takes over.
    """


class StartError(JuizError):
    """A child process of a local stack (demo, benchmarks) died or did not get ready; the message ends with its log."""
