"""`juiz` as a documentation page's reader would run it, with the FAKE engine in place of the judge model:
`python -m tests.docs.fake_juiz score items.jsonl -o results.jsonl`. Only the engine differs (its replies come from
bench.fake_worker, in the shape a real judge's take); parsing, rules, statistics and files are the real code."""

from __future__ import annotations

import sys

from bench.fake_worker import FakeWorkerEngine
from juiz.judging import backend
from juiz_cli import main

if __name__ == "__main__":
    backend.build_engine = lambda settings, say=None: FakeWorkerEngine()  # type: ignore[assignment,misc]
    sys.exit(main())
