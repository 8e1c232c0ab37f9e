"""TruLens side of bench/trulens_peer.py; runs with bench/.venv-trulens/bin/python (TruLens 1.5.3), never juiz's venv.

    bench/.venv-trulens/bin/python bench/trulens_runner.py SPEC.json OUT.json

SPEC: {"base_url": "http://127.0.0.1:N/v1", "model": "judge", "threads": K,
       "items": [{"id", "question", "answer"}, ...], "warmup_items": [...]}
OUT:  {"threads", "seconds", "judgements_per_s", "results": [{"id", "score", "reasons", "seconds", "error"}]}

Each item is one `provider.relevance_with_cot_reasons(question, answer)` call, as TruLens's own feedback functions
make it; K threads call it concurrently (K = 1 is TruLens's default: one call after another). The provider is
TruLens's OpenAI provider pointed at vLLM's OpenAI-compatible server, with two changes: plain chat completions
(a model name TruLens does not know would otherwise go to the Responses API with structured output) and no
pacing (60 calls a minute by default). `warmup_items` (others than `items`) are graded first, untimed.
"""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from trulens.providers.openai import OpenAI

UNPACED_RPM = 1_000_000


class LocalOpenAI(OpenAI):
    """TruLens's OpenAI provider on plain chat completions, for an OpenAI-compatible local server."""

    def _structured_output_supported(self) -> bool:
        return False


def grade(provider: LocalOpenAI, item: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        score, reasons = provider.relevance_with_cot_reasons(item["question"], item["answer"])
    except Exception as exc:  # one failed call is a result of this run, not the end of it
        return {
            "id": item["id"],
            "score": None,
            "reasons": None,
            "seconds": time.perf_counter() - started,
            "error": f"{type(exc).__name__}: {exc}",
        }
    return {
        "id": item["id"],
        "score": None if score is None else float(score),
        "reasons": reasons if isinstance(reasons, dict | str) else str(reasons),
        "seconds": round(time.perf_counter() - started, 3),
        "error": None,
    }


def main(spec_path: str, out_path: str) -> int:
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    provider = LocalOpenAI(model_engine=spec["model"], base_url=spec["base_url"], api_key="EMPTY", rpm=UNPACED_RPM)
    items = spec["items"]
    threads = int(spec["threads"])
    for item in spec.get("warmup_items", []):
        grade(provider, item)
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        results = list(pool.map(lambda item: grade(provider, item), items))
    seconds = time.perf_counter() - started
    out = {
        "threads": threads,
        "seconds": round(seconds, 3),
        "judgements_per_s": round(len(items) / seconds, 4),
        "results": results,
    }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2]))
