"""How often the progress line moves while the seeds are graded: the longest wait between two changes of the line, and
between two moves of its counts (conversations or items done / planned).

    python -m bench.progress_line                        # FAKE engine, 0.5 s a conversation (no model)
    python -m bench.progress_line --conversation-s 2.0
    flock /tmp/juiz-heavy.lock python -m bench.progress_line --score   # a real `juiz score` (JUIZ_ENGINE's engine)
    flock /tmp/juiz-heavy.lock python -m bench.progress_line --demo --code /path/to/checkout --name before

The FAKE run grades in this process with `juiz score`'s own `ProgressLine`; `--score` runs `juiz score` on the seeds
as a person would and timestamps each line of its stderr (not a terminal: a new line when the counts move, at most one
a second, and one every HEARTBEAT_S whatever); `--demo` runs `juiz demo` (`make demo`: API, worker, its own private
Redis unless JUIZ_REDIS_URL answers) and timestamps each progress line of its stdout, from the submission on. `--code`
runs that checkout's juiz (e.g. main's, for a before/after). Writes bench/results/progress_line[_score|_demo].json with
the machine.
"""

from __future__ import annotations

import argparse
import io
import itertools
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import save
from bench.fake_worker import fake_reply
from juiz.engines.cpu import cpu_flags
from juiz.engines.fake import FakeEngine
from juiz.formats.progress_line import ProgressLine
from juiz.formats.readers import read_triples
from juiz.judging.judge import Judge
from schemas import BatchOptions

SEEDS = Path(__file__).resolve().parent.parent / "examples" / "seeds"
LABEL = "grading: "


class Recorder(io.StringIO):
    """A stream noting when each line was written."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[float, str]] = []

    def write(self, text: str) -> int:
        now = time.monotonic()
        self.lines += [(now, line) for line in text.splitlines() if line.strip()]
        return super().write(text)


def intervals(lines: list[tuple[float, str]], started: float) -> dict[str, object]:
    """The waits between changes of the whole line and of its counts (the part before the clock), from `started`."""
    grading = [(t, line) for t, line in lines if line.startswith(LABEL)]
    if not grading:
        return {"lines": 0}
    times = [started] + [t for t, _ in grading]
    counts = [(t, line.split(" · ")[0]) for t, line in grading]
    # The counts' moves, from the start to the last line: a run whose counts never move waits all of it.
    moves = [started] + [t for n, (t, c) in enumerate(counts) if n > 0 and c != counts[n - 1][1]] + [counts[-1][0]]
    first_move = next((t for t, c in counts if not c.startswith(f"{LABEL}0/") and "conversations" in c), None)
    first_item = next((t for t, c in counts if not c.endswith(" 0/3 items")), None)
    return {
        "lines": len(grading),
        "longest_between_lines_s": round(max(b - a for a, b in itertools.pairwise(times)), 2),
        "longest_between_count_moves_s": round(max(b - a for a, b in itertools.pairwise(moves)), 2),
        "count_moves": len(moves) - 2,
        "first_conversation_done_s": None if first_move is None else round(first_move - started, 2),
        "first_item_done_s": None if first_item is None else round(first_item - started, 2),
        "grading_s": round(grading[-1][0] - started, 2),
        "last_line": grading[-1][1],
    }


def fake_run(conversation_s: float) -> dict[str, object]:
    triples = read_triples(SEEDS)
    engine = FakeEngine(fake_reply, conversation_s=conversation_s)
    out = Recorder()
    started = time.monotonic()
    with ProgressLine(len(triples), out) as line:
        Judge(engine).grade(triples, BatchOptions(), progress=line.call(len(triples)))
    return {
        "engine": "FAKE",
        "conversation_s": conversation_s,
        "conversations": sum(engine.calls),
        **intervals(out.lines, started),
    }


def score_run(model: str | None) -> dict[str, object]:
    """`juiz score` on the seeds, its stderr timestamped line by line; grading starts at its first progress line."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "juiz_cli", "score", str(SEEDS), "-o", str(Path(tmp) / "out.jsonl")]
        env = {**os.environ, **({"JUIZ_MODEL": model} if model else {})}
        process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, bufsize=1, env=env)
        assert process.stderr is not None
        lines: list[tuple[float, str]] = []
        for raw in process.stderr:
            lines.append((time.monotonic(), raw.rstrip("\n")))
            print(raw, end="", file=sys.stderr)
        code = process.wait()
    first = next((t for t, line in lines if line.startswith(LABEL)), None)
    figures = intervals(lines, first) if first is not None else {"lines": 0}
    startup = [line for _, line in lines if not line.startswith(LABEL)][-20:]  # juiz's own lines come last
    engine = {"engine": os.environ.get("JUIZ_ENGINE", "vllm"), "model": model or os.environ.get("JUIZ_MODEL")}
    return {**engine, "exit_code": code, "startup_lines": startup, **figures}


# `juiz demo`'s progress lines: `  running   3/23 conversations ... (ok 0, parse_error 0, failed 0) · ETA ~1m  [12.3s]`.
DEMO_STATUSES = ("queued", "running", "done", "failed", "cancelled")


def demo_figures(line: str) -> str:
    """A demo progress line without its clock and ETA: what moves when the batch moves."""
    return line.split("  [")[0].split(" · ETA")[0].strip()


ETA_PATTERN = re.compile(r" · ETA ~(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def eta_accuracy(lines: list[tuple[float, str]], end: float) -> dict[str, object]:
    """How the ETAs a demo printed compare with the time that was really left (`end`: when the batch was over): the
    first one, and the ratio ETA / time left over the lines printed before the last 5% of the grading."""
    shown = []
    for t, line in lines:
        found = ETA_PATTERN.search(line)
        if found:
            hours, minutes, seconds = (int(part or 0) for part in found.groups())
            shown.append((t, hours * 3600 + minutes * 60 + seconds, end - t))
    if not shown:
        return {}
    span = end - shown[0][0]
    ratios = [eta / left for _, eta, left in shown if left > 0.05 * span]
    _, first_eta, first_left = shown[0]
    return {
        "first_eta_s": first_eta,
        "left_at_first_eta_s": round(first_left, 1),
        "eta_over_left_median": round(statistics.median(ratios), 2) if ratios else None,
        "eta_over_left_max": round(max(ratios), 2) if ratios else None,
        "eta_over_left_min": round(min(ratios), 2) if ratios else None,
    }


def demo_run(code: Path | None) -> dict[str, object]:
    """`juiz demo`, its stdout timestamped line by line; grading starts at its `submitted` line."""
    env = {**os.environ, **({"PYTHONPATH": str(code)} if code else {})}
    command = [sys.executable, "-m", "juiz_cli", "demo"]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, bufsize=1, env=env, cwd=code
    )
    assert process.stdout is not None
    lines: list[tuple[float, str]] = []
    for raw in process.stdout:
        lines.append((time.monotonic(), raw.rstrip("\n")))
        print(raw, end="", file=sys.stderr)
    code_ = process.wait()
    submitted = next((t for t, line in lines if line.startswith("submitted ")), None)
    progress = [(t, demo_figures(line)) for t, line in lines if line.strip().split(" ")[0] in DEMO_STATUSES]
    if submitted is None or not progress:
        return {"exit_code": code_, "lines": 0, "output": [line for _, line in lines][-30:]}
    # The figures' changes, from the submission to the last progress line (the batch over).
    changes = [submitted] + [t for n, (t, f) in enumerate(progress) if n == 0 or f != progress[n - 1][1]]
    changes.append(progress[-1][0])
    waits = [round(b - a, 2) for a, b in itertools.pairwise(changes)]
    return {
        "engine": os.environ.get("JUIZ_ENGINE", "auto"),
        "cpu_step_tokens": os.environ.get("JUIZ_CPU_STEP_TOKENS", "by dtype"),  # 0: vLLM's default
        "llamacpp_step_tokens": os.environ.get("JUIZ_LLAMACPP_BATCH_TOKENS", "default"),
        "code": str(code) if code else "this checkout",
        "exit_code": code_,
        "lines": len(progress),
        "changes": len(changes) - 2,
        "longest_without_change_s": max(waits),
        "waits_between_changes_s": waits,
        "grading_s": round(progress[-1][0] - submitted, 2),
        "eta": eta_accuracy([(t, line) for t, line in lines if t >= submitted], progress[-1][0]),
        "progress_lines": [f"{t - submitted:7.1f}s {f}" for t, f in progress],
        "summary": [line for _, line in lines if "graded (" in line or line.startswith(("ready after", "Redis:"))],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.progress_line", description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversation-s", type=float, default=0.5, help="the FAKE engine's time per conversation")
    parser.add_argument("--score", action="store_true", help="run a real `juiz score` on the seeds instead")
    parser.add_argument("--model", default=None, help="--score: the judge model (JUIZ_MODEL)")
    parser.add_argument("--demo", action="store_true", help="run a real `juiz demo` instead")
    parser.add_argument("--code", type=Path, default=None, help="--demo: the checkout whose juiz runs (default: this)")
    parser.add_argument("--name", default="", help="--demo: a suffix for the results file (e.g. before, after)")
    args = parser.parse_args(argv)
    if args.demo:
        figures = demo_run(args.code.resolve() if args.code else None)
    else:
        figures = score_run(args.model) if args.score else fake_run(args.conversation_s)
    flags = cpu_flags()
    figures["cpu_flags"] = sorted(f for f in flags if f.startswith(("avx", "amx", "fma", "f16c")))
    for key, value in figures.items():
        if key not in ("startup_lines", "progress_lines", "output"):
            print(f"{key}: {value}")
    name = f"progress_line_score_{args.model or 'default'}" if args.score else "progress_line"
    if args.demo:
        name = "_".join(part for part in ("progress_line_demo", figures.get("engine"), args.name) if part)
    save(name, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
