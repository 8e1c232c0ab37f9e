"""The reaper: an engine's processes die with the process that owns them, whatever kills it.

vLLM 0.32 runs the model in child processes (`VLLM::EngineCore`, and under it `VLLM::Worker`) that are never told
when their parent dies: SIGKILL of a juiz worker left both alive, re-parented to init, holding ~6 GB, and the next
worker loaded a second engine beside them. A reaper is a tiny child process (stdlib + psutil, no model) started just
before the engine. It waits on a pidfd of its owner (readable when the owner exits, however it dies) and then
SIGKILLs the engine processes.

Which processes: the owner's descendants that appear while the engine starts (the reaper records them every
`POLL_S`, so an owner killed during start-up is covered too), plus the list the owner sends once the engine is up.
Each is recorded with its start time and killed only if the pid still names that process. Never a process group: the
owner may share its group with a shell or a test runner.

Why not the alternatives: `prctl(PR_SET_PDEATHSIG)` fires when the *thread* that started the child exits (an engine
may be built in a thread that ends long before its process); EOF on a pipe never comes when vLLM *forks* its engine
core (the default start method), because the fork inherits the pipe's write end.

Owner → reaper, over a pipe, one line each: `engine <pid>:<start time> ...` (the engine is up: the list is final),
`done` (the owner shut the engine down itself: exit without killing) and `kill` (the engine failed to start: kill
what was recorded now).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterable, Sequence

import psutil

POLL_S = 0.2  # how often the reaper records the owner's new descendants while the engine starts
Tag = tuple[int, float]  # pid, process start time (pids are reused; the pair is not)


def _tag(process: psutil.Process) -> Tag:
    return process.pid, process.create_time()


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


class Reaper:
    """Owner side. Start it right before the engine, call `engine_started()` after, `close()` after a clean shutdown."""

    def __init__(self) -> None:
        owner = os.getpid()
        self._existing = {p.pid for p in descendants(owner)}  # not the engine's: never killed
        read_end, self._write_end = os.pipe()
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "juiz.runtime.reaper", str(owner), *map(str, sorted(self._existing))],
                stdin=read_end,
                stdout=subprocess.PIPE,
                close_fds=True,
            )
        finally:
            os.close(read_end)
        self._closed = False
        self.engine_pids: list[int] = []  # known once the engine is up
        # Wait until it watches (signals ignored, owner's pidfd open) before any engine process exists.
        assert self._process.stdout is not None
        with self._process.stdout:
            if self._process.stdout.readline().strip() != b"watching":
                self._process.wait()
                os.close(self._write_end)
                raise RuntimeError(f"the engine reaper did not start (exit code {self._process.returncode})")

    @property
    def pid(self) -> int:
        return self._process.pid

    def engine_started(self) -> None:
        """Send the engine's processes (the owner's descendants new since the reaper began) as the final list."""
        skip = self._existing | {self._process.pid}
        tags = [_tag(p) for p in descendants(os.getpid()) if p.pid not in skip and p.is_running()]
        self.engine_pids = [pid for pid, _ in tags]
        self._send("engine " + " ".join(f"{pid}:{started!r}" for pid, started in tags))

    def close(self, timeout_s: float = 10.0) -> None:
        """The engine was shut down cleanly: let the reaper go without killing anything."""
        self._finish("done", timeout_s)

    def reap(self, timeout_s: float = 30.0) -> None:
        """The engine failed to start: kill whatever processes of it the reaper saw, now."""
        self._finish("kill", timeout_s)

    def _finish(self, word: str, timeout_s: float) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._send(word)
        finally:
            os.close(self._write_end)
        try:
            self._process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def _send(self, line: str) -> None:
        os.write(self._write_end, (line + "\n").encode())


def _parse_tags(words: Iterable[str]) -> set[Tag]:
    tags = set()
    for word in words:
        pid, _, started = word.partition(":")
        tags.add((int(pid), float(started)))
    return tags


def kill(tags: Iterable[Tag]) -> list[int]:
    """SIGKILL each process still running under its recorded start time, and whatever it started since."""
    victims: dict[int, psutil.Process] = {}
    for pid, started in tags:
        try:
            process = psutil.Process(pid)
            if process.create_time() != started:
                continue  # the pid was reused by an unrelated process
        except psutil.Error:
            continue
        victims[pid] = process
        for child in descendants(pid):
            victims[child.pid] = child
    for process in victims.values():
        with contextlib.suppress(psutil.Error):
            process.kill()  # psutil refuses if the pid was reused since it was looked up
    return sorted(victims)


def watch(owner: int, excluded: set[int], fd: int = 0) -> None:
    """Reaper side: record the engine's processes, then wait for the owner to exit and kill them."""
    excluded = excluded | {os.getpid()}
    try:
        owner_exit: int | None = os.pidfd_open(owner)  # readable once the owner has exited, however it dies
    except ProcessLookupError:
        return  # the owner died before its engine started: nothing recorded, nothing to kill
    except (AttributeError, OSError):  # a kernel older than 5.3: notice the re-parenting instead, every POLL_S
        owner_exit = None
    print("watching", flush=True)
    recorded: set[Tag] = set()
    final = reap_now = False
    buffer = b""
    while True:
        watched = [fd] if owner_exit is None else [fd, owner_exit]
        ready, _, _ = select.select(watched, [], [], None if final and owner_exit is not None else POLL_S)
        if not final:
            for process in descendants(owner):
                if process.pid not in excluded:
                    with contextlib.suppress(psutil.Error):
                        recorded.add(_tag(process))
        if fd in ready:  # messages first: `done` followed by the owner's exit must not kill anything
            chunk = os.read(fd, 65536)
            if not chunk:
                break  # EOF without `done`: the owner is gone
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                word, _, rest = line.decode().partition(" ")
                if word == "done":
                    return
                if word == "kill":
                    reap_now = True
                if word == "engine":
                    recorded |= _parse_tags(rest.split())
                    final = True
        owner_gone = owner_exit in ready if owner_exit is not None else os.getppid() != owner
        if owner_gone or reap_now:
            break
    killed = kill(recorded)
    if killed:
        why = "its engine failed to start" if reap_now else "it died"
        print(f"juiz reaper: owner {owner}: {why}; killed engine processes {killed}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    # Ctrl-C, a terminal hang-up or `timeout`'s SIGTERM reach the owner's whole process group, the reaper included:
    # it must outlive the owner to clean up, and it exits on its own once the owner is gone.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    watch(int(args[0]), {int(a) for a in args[1:]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
