"""Helpers for the tests that run FAKE-engine workers as subprocesses or fault an engine: waiting for a condition,
the worker processes themselves, what they graded, and an engine that fails its first calls."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from redis import Redis

from bench.fake_worker import GRADED_KEY, FakeWorkerEngine
from juiz.engines.base import CallControl, Completion, Conversation, GenerationRequest
from juiz.runtime.settings import ENV_PREFIX, Settings
from juiz.store import text

REPO = Path(__file__).resolve().parents[2]
# Guards against a hang, not timing assertions: every wait ends on an event long before this.
WAIT_S = 120


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def settings_env(settings: Settings) -> dict[str, str]:
    # An unset setting (None) stays out of the environment, as it was.
    dumped = settings.model_dump(mode="json").items()
    env = {ENV_PREFIX + name.upper(): str(value) for name, value in dumped if value is not None}
    env[ENV_PREFIX + "API_KEYS"] = settings.api_keys.get_secret_value()
    return env


def graded_counts(redis: Redis) -> dict[str, int]:
    return {text(k): int(v) for k, v in redis.hgetall(GRADED_KEY).items()}


class Workers:
    """Worker subprocesses (`python -m bench.fake_worker`), stopped at the end of the test."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, settings: Settings, **env: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.fake_worker"],
            cwd=REPO,
            env={**os.environ, **settings_env(settings), "JUIZ_FAKE_COUNT": "1", **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class FlakyEngine(FakeWorkerEngine):
    """FAKE engine failing its first `failures` calls with the given error."""

    def __init__(self, redis: Redis, error: Exception, failures: int) -> None:
        super().__init__(redis)
        self.error = error
        self.failures = failures
        self.attempts = 0

    def generate(
        self, conversations: Sequence[Conversation], request: GenerationRequest, control: CallControl | None = None
    ) -> list[Completion]:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise self.error
        return super().generate(conversations, request, control)
