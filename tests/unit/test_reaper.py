"""The reaper kills an owner's engine processes when the owner dies, however it dies; a clean close kills nothing.

A stand-in owner (a small Python process) starts a reaper, then an "engine" child (`sleep`), and is SIGKILLed.
Waiting is on events: the test waits for the owner's report line, and on a pidfd of the engine process (readable
when it exits), with a generous cap.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import psutil
import pytest

OWNER = """
import subprocess, sys, time
from juiz.runtime.reaper import Reaper

reaper = Reaper()
early = subprocess.Popen(["sleep", "600"])  # started while the engine starts: recorded by the reaper's polling
if sys.argv[1] == "announce":
    late = subprocess.Popen(["sleep", "600"])
    reaper.engine_started()
    print(reaper.pid, early.pid, late.pid, flush=True)
else:  # dies before telling the reaper anything: the reaper must have recorded `early` on its own
    while early.pid not in {p.pid for p in __import__("psutil").Process().children()}:
        time.sleep(0.01)
    time.sleep(1.0)  # a few of the reaper's polls (POLL_S = 0.2 s)
    print(reaper.pid, early.pid, flush=True)
if sys.argv[2] == "reap":  # the engine failed to start
    reaper.reap()
    print("reaped", flush=True)
if sys.argv[2] == "close":
    early.kill(); early.wait()
    reaper.close()
    print("closed", flush=True)
sys.stdin.read()  # block until the test kills us
"""

CAP_S = 60.0  # generous: the reaper reacts within milliseconds; a loaded 2-core machine may be slow to schedule it


@contextmanager
def owner(*args: str) -> Iterator[tuple[subprocess.Popen[str], list[int]]]:
    pids: list[int] = []
    with subprocess.Popen(
        [sys.executable, "-c", OWNER, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stdout is not None
            pids = [int(p) for p in process.stdout.readline().split()]
            assert pids, "the owner did not start"
            yield process, pids
        finally:
            if process.poll() is None:
                process.kill()
            for pid in pids:  # never leave a sleeper behind, whatever the outcome
                with contextlib.suppress(psutil.Error):
                    psutil.Process(pid).kill()


def exits_within(pid: int, cap_s: float = CAP_S) -> bool:
    """Wait on a pidfd (readable when the process exits) instead of sleeping."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], cap_s)
        return bool(ready)
    finally:
        os.close(fd)


def test_sigkill_of_the_owner_kills_its_engine_processes() -> None:
    with owner("announce", "stay") as (process, (reaper, early, late)):
        assert psutil.pid_exists(early) and psutil.pid_exists(late)
        process.send_signal(signal.SIGKILL)
        assert exits_within(early) and exits_within(late)
        assert exits_within(reaper)  # and then goes itself


def test_an_owner_killed_during_start_up_leaves_nothing() -> None:
    with owner("silent", "stay") as (process, (reaper, early)):
        process.send_signal(signal.SIGKILL)
        assert exits_within(early)
        assert exits_within(reaper)


def test_a_failed_start_is_reaped_at_once() -> None:
    with owner("silent", "reap") as (process, (reaper, early)):
        assert process.stdout is not None and process.stdout.readline().strip() == "reaped"
        assert exits_within(early) and exits_within(reaper)
        assert process.poll() is None  # the owner lives on (to report its error)


def test_a_clean_close_kills_nothing() -> None:
    with owner("announce", "close") as (process, (reaper, _early, late)):
        assert process.stdout is not None and process.stdout.readline().strip() == "closed"
        assert exits_within(reaper)
        assert psutil.Process(late).is_running()  # the owner's own business
        process.send_signal(signal.SIGKILL)
        process.wait()
        assert psutil.Process(late).is_running()  # still: the reaper had been told the engine was shut down


def test_a_reused_pid_is_never_killed() -> None:
    from juiz.runtime.reaper import kill

    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        started = psutil.Process(sleeper.pid).create_time()
        assert kill([(sleeper.pid, started - 100.0)]) == []  # same pid, another start time: someone else's now
        assert sleeper.poll() is None
        assert kill([(sleeper.pid, started)]) == [sleeper.pid]
        assert sleeper.wait(timeout=CAP_S) == -signal.SIGKILL
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_the_reaper_outlives_signals_sent_to_the_whole_group(signum: int) -> None:
    with owner("announce", "stay") as (process, (reaper, early, _late)):
        os.kill(reaper, signum)  # as `timeout` or Ctrl-C would send to the owner's process group
        process.send_signal(signal.SIGKILL)
        assert exits_within(early)
