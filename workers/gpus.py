"""`juiz worker --gpus all|0,1`: one worker process per GPU, each pinned with `CUDA_VISIBLE_DEVICES`; with no GPU,
one CPU worker in this process."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence

from workers.worker import main

log = logging.getLogger(__name__)


def detect_gpus() -> list[str]:
    """GPU indices from `nvidia-smi -L` (or torch when nvidia-smi is missing); empty without a GPU."""
    if shutil.which("nvidia-smi"):
        try:
            listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True)
        except (OSError, subprocess.SubprocessError):
            return []
        return [str(n) for n, line in enumerate(listing.stdout.splitlines()) if line.startswith("GPU ")]
    try:
        import torch
    except ImportError:
        return []
    return [str(n) for n in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def select_gpus(spec: str | None) -> list[str]:
    """'all' → every GPU found; '0,1' → those; None/'none' → no GPU (one CPU worker)."""
    if spec is None or spec.lower() in ("", "none", "cpu"):
        return []
    if spec.lower() == "all":
        return detect_gpus()
    gpus = [part.strip() for part in spec.split(",") if part.strip()]
    if not all(g.isdigit() for g in gpus):
        from juiz.runtime.errors import InputError

        raise InputError("expected 'all' or GPU indices like 0,1", source="--gpus")
    return gpus


def launch(gpus: Sequence[str], *, burst: bool = False) -> int:
    """One worker process per GPU, each pinned with CUDA_VISIBLE_DEVICES; no GPU → one CPU worker, in this process.

    We pass SIGTERM on to every child, wait for all of them and report the worst exit code.
    """
    extra = ["--burst"] if burst else []
    if len(gpus) <= 1:
        if gpus:
            os.environ["CUDA_VISIBLE_DEVICES"] = gpus[0]
        return main(extra)
    children = []
    for gpu in gpus:
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu}
        children.append(subprocess.Popen([sys.executable, "-m", "workers.worker", *extra], env=env))
        log.info("started worker pid %d on GPU %s", children[-1].pid, gpu)

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    # SIGTERM (docker stop, systemd) reaches only us: pass it on. Ctrl-C already reaches the whole process group,
    # and a second SIGINT would make RQ stop a job mid-call, so we only wait.
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    codes = [child.wait() for child in children]
    return max(codes, key=abs)
