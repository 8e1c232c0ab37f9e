"""Judges (bench.labelled cells) side by side on ONE engine, the same items, one after the other: seconds per item,
the prompt tokens the engine computed per item (its own counts: prompt tokens less those its cache served) and every
agreement figure bench.judge_quality reports (accuracy, ρ, κ per metric and the verdict).

    flock /tmp/juiz-heavy.lock .venv/bin/python -m bench.cells_side_by_side --cells checks-8,checks-10 --limit 12

The engine is the one `JUIZ_ENGINE` picks (`auto` by default: llama.cpp on a CPU without bf16), started once; the
cells run in the order given, each on the same spread subset of the split (bench.labelled.labelled_set). The split is
dev unless told: the test split is graded once, for a design chosen on dev.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from typing import Any

from bench.common import save, setup_logging
from bench.judge_quality import CountingEngine, cost_row, graded, rag_rows
from bench.labelled import CELLS, labelled_set
from juiz.engines.models import DEFAULT_MODEL
from juiz.judging.backend import build_engine
from juiz.judging.judge import Judge
from juiz.runtime.settings import Settings

log = logging.getLogger("bench.cells_side_by_side")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", required=True, help=f"comma-separated, from {', '.join(CELLS)}")
    parser.add_argument("--split", choices=["dev", "test"], default="dev")
    parser.add_argument("--limit", type=int, default=None, help="grade a spread subset of N items")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    args = parser.parse_args(argv)
    setup_logging()
    names = args.cells.split(",")
    if unknown := [c for c in names if c not in CELLS]:
        parser.error(f"unknown cell(s) {', '.join(unknown)}; known: {', '.join(CELLS)}")
    triples = labelled_set(args.split, args.limit)
    started = time.perf_counter()
    engine = build_engine(Settings.from_env(None, model=args.model), say=log.info)
    startup = time.perf_counter() - started
    counting = CountingEngine(engine)
    judge = Judge(counting)
    cells: dict[str, Any] = {}
    name = f"cells_{args.split}" + (f"_limit{args.limit}" if args.limit else "") + "_" + "_".join(names)

    def write() -> None:  # after every cell: what was measured survives a late failure
        save(
            name,
            {
                "engine": dict(engine.origin),
                "engine_env": os.environ.get("JUIZ_ENGINE", "auto"),
                "model": args.model,
                "split": args.split,
                "items": len(triples),
                "item_ids": [t.id for t in triples],
                "startup_s": round(startup, 1),
                "cells": cells,
            },
        )

    try:
        for cell_name in names:
            cell = CELLS[cell_name]
            results, seconds, counts = graded(counting, judge, cell, triples)
            cost = cost_row(counts, seconds, len(triples))
            computed = counts.get("prompt_tokens", 0) - counts.get("cached_prompt_tokens", 0)
            cost["computed_prompt_tokens_per_item"] = round(computed / max(1, len(triples)), 1)
            rows = rag_rows(cell, triples, results, seconds)
            cells[cell_name] = {"versions": cell.versions, "seconds": round(seconds, 1), "cost": cost, "rows": rows}
            log.info("cell %s: %d items in %.0fs (%s)", cell_name, len(triples), seconds, cost)
            write()
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
