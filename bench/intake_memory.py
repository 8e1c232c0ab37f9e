"""What a hostile body costs the API before it is refused: peak RSS growth of `juiz serve` for a body of tiny context
segments just under max_body_bytes (64 MiB by default), and the seconds to the refusal.

A private stack (redis-server, `juiz serve`, one FAKE-engine worker so the stack is ready). The body is items of
256 segments `{"text":"a"}` each, as many as fit under the limit. The API's RSS is read from /proc before the POST
(VmRSS) and after (VmHWM: the process's peak); growth = peak − before. Target: < 200 MiB, a 413 naming the limit.

    .venv/bin/python -m bench.intake_memory [--mib 63.9]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import save
from bench.stack import service

MiB = 1 << 20
SEGMENT = b'{"text":"a"}'


def body_of_tiny_segments(size: int, segments: int = 256) -> tuple[bytes, int, int]:
    item = b'{"question":"q","answer":"a","context":[' + b",".join([SEGMENT] * segments) + b"]}"
    count = max(1, (size - 20) // (len(item) + 1))
    body = b'{"items":[' + b",".join([item] * count) + b"]}"
    return body, count, count * segments


def _status(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) * 1024
    return fields


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=float, default=63.9, help="body size in MiB (max_body_bytes is 64 MiB)")
    args = parser.parse_args()
    body, items, segments = body_of_tiny_segments(int(args.mib * MiB))
    with service("intake_memory", "fake-engine", fake=True) as stack:
        api = next(c for c in stack.children if c.name == "API")
        before = _status(api.process.pid)
        started = time.perf_counter()
        response = httpx.post(
            f"{stack.url}/v1/batches",
            content=body,
            headers={"Authorization": f"Bearer {stack.api_key}", "Content-Type": "application/json"},
            timeout=600,
        )
        seconds = time.perf_counter() - started
        time.sleep(0.5)
        after = _status(api.process.pid)
    growth = after["VmHWM"] - before["VmRSS"]
    payload: dict[str, Any] = {
        "body_bytes": len(body),
        "items": items,
        "segments": segments,
        "status": response.status_code,
        "answer": response.json() if response.headers.get("content-type", "").startswith("application/json") else None,
        "seconds_to_answer": round(seconds, 3),
        "api_rss_before_mib": round(before["VmRSS"] / MiB, 1),
        "api_peak_rss_mib": round(after["VmHWM"] / MiB, 1),
        "api_rss_after_mib": round(after["VmRSS"] / MiB, 1),
        "peak_growth_mib": round(growth / MiB, 1),
        "target_growth_mib": 200,
    }
    path = save("intake_memory", payload)
    print({k: v for k, v in payload.items() if k != "answer"}, payload["answer"], f"→ {path}")


if __name__ == "__main__":
    main()
