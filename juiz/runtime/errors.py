"""Every error juiz raises on purpose. Catch `JuizError` to catch them all.

JuizError
├── InputError            bad user input: a file, line/item and field are named (CLI exit 2, HTTP 4xx)
├── PromptError           a prompt id or prompt file that does not exist or does not render
├── ModelError            a model path that is missing or not loadable, a model that was never pulled
├── EngineError           the judge engine failed as a whole (the items are marked `failed`)
│   ├── TransientEngineError   worth retrying later (connection refused, timeout)
│   └── EngineDeadError        the engine can't serve any request any more (its process died): stop the worker
├── IdempotencyConflict   an Idempotency-Key used before with another request body (HTTP 409)
├── StartError            a child process of a local stack died or did not get ready
├── juiz.calibration.fitting.CalibrationUnavailable
│                                             labels that can't support a fit (also a ValueError; HTTP 409)
├── juiz.clients.http.ApiError                      a juiz API answered an error
├── juiz.engines.openai_server.ServerError            one non-completion answer of a judge server (handled inside)
├── service.errors.LimitExceeded              a configured limit was exceeded (HTTP 413)
├── service.ui.session.SignInRequired         a web page without a valid session (sent to sign in; 401 to a script)
└── service.ui.session.CsrfRejected           a web page's form without its session's token, or from elsewhere (403)
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError

# pydantic's union member tags in an error's location (`str`, `list[Segment]`, `function-after[...]`): not fields.
_UNION_TAG = re.compile(r"^(str|int|float|bool|none|[\w-]+\[.*\])$")


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

    @classmethod
    def from_validation(
        cls, exc: ValidationError, *, source: str | None = None, line: int | None = None, prefix: str = ""
    ) -> InputError:
        """pydantic's error list → one InputError naming the first bad field (`prefix` + its dotted path).

        For a union field pydantic reports one error per member; the deepest one is the one the user meant (a list of
        segments with a bad segment, not "context should be a string")."""
        errors = exc.errors()
        first = errors[0]
        same_field = [e for e in errors if e["loc"][:1] == first["loc"][:1]]
        chosen = max(same_field, key=lambda e: len(_clean_loc(e["loc"])))
        if chosen["type"] == "missing":
            message = "required field is missing"
        elif chosen["type"] == "extra_forbidden":
            message = "unknown field"
        else:
            message = str(chosen["msg"]).removeprefix("Value error, ")
        path = ".".join(_clean_loc(chosen["loc"]))
        field = f"{prefix}.{path}" if prefix and path else (prefix or path or None)
        return cls(message, source=source, line=line, field=field)

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


def _clean_loc(loc: tuple[int | str, ...]) -> list[str]:
    return [str(part) for part in loc if not (isinstance(part, str) and _UNION_TAG.match(part))]


class IdempotencyConflict(JuizError):
    """The Idempotency-Key was used before with a different request body."""

    def __init__(self, batch_id: str) -> None:
        self.batch_id = batch_id
        super().__init__(f"Idempotency-Key already used for batch {batch_id} with a different request")
