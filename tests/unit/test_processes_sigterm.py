"""A SIGTERM to a process that started children stops their groups on the way out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from juiz.runtime.processes import child, stopped_on_sigterm

    with stopped_on_sigterm(), child("sleeper", ["sleep", "600"], {}, Path(sys.argv[1])) as c:
        print(c.process.pid, flush=True)
        time.sleep(600)
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] if Path(f"/proc/{pid}").exists() else ""
    return state != "Z"


def test_sigterm_stops_the_children(tmp_path: Path) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "sleeper.log")], stdout=subprocess.PIPE, text=True
    ) as parent:
        assert parent.stdout is not None
        sleeper = int(parent.stdout.readline())
        assert _alive(sleeper)
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=30) == 128 + signal.SIGTERM
    assert not _alive(sleeper)


STUBBORN = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from juiz.runtime.processes import child, stopped_on_sigterm

    # A child that finishes its work before it stops, as an RQ worker does on SIGTERM.
    stubborn = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "print('ready', flush=True); time.sleep(600)"]
    with stopped_on_sigterm(), child("stubborn", stubborn, {}, Path(sys.argv[1])) as c:
        while "ready" not in Path(sys.argv[1]).read_text():
            time.sleep(0.05)
        print(c.process.pid, flush=True)
        time.sleep(600)
    """
)


def test_a_second_signal_while_a_child_lingers_kills_it(tmp_path: Path) -> None:
    log = tmp_path / "stubborn.log"
    with subprocess.Popen([sys.executable, "-c", STUBBORN, str(log)], stdout=subprocess.PIPE, text=True) as parent:
        assert parent.stdout is not None
        stubborn = int(parent.stdout.readline())
        parent.send_signal(signal.SIGINT)  # the child is asked to stop and ignores it: the parent waits its grace
        with pytest.raises(subprocess.TimeoutExpired):
            parent.wait(timeout=1)
        parent.send_signal(signal.SIGTERM)  # the person asks again: no second wait of the grace period
        assert parent.wait(timeout=10) != 0
    assert not _alive(stubborn)
