"""A killed worker's engine dies with it: SIGKILL of a process holding a real VLLMEngine, mid-call, leaves no
`VLLM::EngineCore` or `VLLM::Worker` behind (they used to be re-parented to init and live on, holding ~6 GB).

One more engine start than the session's: the owner must be a process of its own to be killed. Waiting is on events:
the owner's output lines, then a pidfd per engine process (readable when it exits), with a generous cap.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from juiz.engines.models import TEST_MODEL, model_dir
from tests.unit.test_reaper import exits_within

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]
START_CAP_S = 600  # a loaded 2-core machine has taken minutes to start even the tiny engine
EXIT_CAP_S = 120


def wait_for_line(process: subprocess.Popen[bytes], prefix: str, cap_s: float) -> str:
    """The owner's next stdout line starting with `prefix` (vLLM logs to stdout too: its lines are skipped).

    stdout is unbuffered here, so `select` never misses a line already read into a buffer.
    """
    assert process.stdout is not None
    deadline = time.monotonic() + cap_s
    while (remaining := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([process.stdout], [], [], remaining)
        if not ready:
            break
        line = process.stdout.readline().decode(errors="replace")
        assert line, f"the engine owner exited (code {process.wait()}) before printing {prefix!r}"
        if line.startswith(prefix):
            return line
    raise AssertionError(f"the engine owner printed no {prefix!r} line within {cap_s} s")


def test_sigkill_of_the_owner_mid_call_kills_its_engine_processes() -> None:
    if not (model_dir(TEST_MODEL) / "config.json").exists():
        pytest.skip(f"{TEST_MODEL} is not provisioned: run `juiz models pull {TEST_MODEL}`")
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}  # a second engine beside the session's: keep it small
    engine_pids: list[int] = []
    with subprocess.Popen(
        [sys.executable, "-m", "tests.engine.engine_owner"], cwd=REPO, env=env, stdout=subprocess.PIPE, bufsize=0
    ) as owner:
        try:
            line = wait_for_line(owner, "engine ", START_CAP_S)
            engine_pids = [int(p) for p in line.split()[1:]]
            names = {psutil.Process(pid).name() for pid in engine_pids}
            assert "VLLM::EngineCore" in names, names
            wait_for_line(owner, "generating", EXIT_CAP_S)
            owner.send_signal(signal.SIGKILL)
            owner.wait()
            survivors = [pid for pid in engine_pids if not exits_within(pid, EXIT_CAP_S)]
            assert survivors == [], f"engine processes outlived their owner: {survivors}"
        finally:
            if owner.poll() is None:
                owner.kill()
            for pid in engine_pids:  # never leave an engine behind, whatever the outcome
                with contextlib.suppress(psutil.Error):
                    psutil.Process(pid).kill()
