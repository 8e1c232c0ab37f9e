"""`juiz demo` (`make demo`): the whole service on this machine, grading the seeds' triples over HTTP.

    Redis (a private redis-server when none answers at JUIZ_REDIS_URL) → the API (`juiz serve`) → one real worker
    (`juiz worker`, vLLM on JUIZ_MODEL, default qwen2.5-coder-1.5b-instruct) → submit the seeds with juiz.clients.http →
    progress → scores, automated vs manual labels → the agreement report the API computed → seconds end to end

Everything it starts it stops at the end, also on Ctrl-C or an error. The queues get names of their own, so a
shared Redis (and any worker already listening on it) is left alone.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TextIO

from juiz.agreement.statistics import format_agreement
from juiz.clients import JuizClient
from juiz.formats.progress_line import BatchProgressPrinter
from juiz.formats.readers import read_triples, write_judgements
from juiz.formats.report import write_report
from juiz.runtime.errors import InputError
from juiz.runtime.processes import child, free_port, private_redis, redis_pings, stopped_on_sigterm, wait_until
from juiz.runtime.settings import Settings
from schemas import Judgement, Triple

SEEDS = Path(__file__).resolve().parent.parent / "examples" / "seeds"
READY_TIMEOUT_S = 1800  # a first start compiles and loads the model: minutes on CPU
DEMO_JOB_TIMEOUT_S = 3600  # the chunk job's timeout for the demo's stack (JUIZ_JOB_TIMEOUT_S wins when set)


@contextmanager
def redis_at(url: str, workdir: Path, out: TextIO) -> Iterator[str]:
    """The Redis at `url` when it answers; otherwise a private redis-server on a free port, stopped afterwards."""
    if redis_pings(url):
        print(f"Redis: using {url}", file=out)
        yield url
        return
    with private_redis(workdir, dict(os.environ)) as (private, _):
        print(f"Redis: none at {url}; started a private redis-server at {private}", file=out)
        yield private


def _fmt(value: object, spec: str = "") -> str:
    if value is None:
        return "-"
    return format(value, spec) if spec else str(value)


def results_table(judgements: Sequence[Judgement]) -> str:
    rows = [f"{'id':8} {'status':11} {'score':>5} {'norm':>5} {'E[score]':>8}  {'automated':9} {'manual':6}"]
    for j in judgements:
        rows.append(
            f"{j.id[:8]:8} {j.status.value:11} {_fmt(j.score):>5} {_fmt(j.normalized_score, '.2f'):>5} "
            f"{_fmt(j.expected_score, '.2f'):>8}  {_fmt(j.automated_label):9} {_fmt(j.manual_label):6}"
        )
    return "\n".join(rows)


def run_demo(seeds_dir: Path = SEEDS, out: TextIO = sys.stdout) -> int:
    started = time.perf_counter()
    settings = Settings.from_env()
    files = sorted(seeds_dir.glob("00*.txt"))
    if not files:
        raise InputError("no seed reports (00*.txt) here", source=str(seeds_dir))
    triples: list[Triple] = [t for path in files for t in read_triples(path)]

    with ExitStack() as stack:
        stack.enter_context(stopped_on_sigterm())
        workdir = Path(tempfile.mkdtemp(prefix="juiz-demo-"))  # kept: the logs of what ran
        redis_url = stack.enter_context(redis_at(settings.redis_url, workdir, out))
        name, key, port = f"juiz-demo-{secrets.token_hex(3)}", secrets.token_urlsafe(16), free_port()
        env = {
            **os.environ,
            "JUIZ_REDIS_URL": redis_url,
            "JUIZ_QUEUE": name,
            "JUIZ_PRIORITY_QUEUE": f"{name}-priority",
            "JUIZ_API_KEYS": f"demo:{key}",
            "JUIZ_MODEL": settings.model,
            # The seeds' contexts run to ~4,700 tokens: on a CPU without bf16 instructions one call grading all three
            # took 13.5 min, past the default job timeout (900 s), which then timed every item out.
            "JUIZ_JOB_TIMEOUT_S": os.environ.get("JUIZ_JOB_TIMEOUT_S", str(DEMO_JOB_TIMEOUT_S)),
        }
        juiz = [sys.executable, "-m", "juiz_cli"]
        api = stack.enter_context(child("API", [*juiz, "serve", "--port", str(port)], env, workdir / "api.log"))
        worker = stack.enter_context(child("worker", [*juiz, "-v", "worker"], env, workdir / "worker.log"))
        client = stack.enter_context(JuizClient(f"http://127.0.0.1:{port}", api_key=key, timeout_s=600))
        print(f"API: http://127.0.0.1:{port} (OpenAPI UI at /schema); worker loading {settings.model} …", file=out)
        print(f"web page: http://127.0.0.1:{port}/ui — sign in with the demo key {key}", file=out)
        print(f"logs: {workdir}", file=out)

        def ready() -> bool:
            try:
                return client.ready().ready
            except Exception:
                return False

        wait_until(ready, READY_TIMEOUT_S, [api, worker], "the API and a worker")
        print(f"ready after {time.perf_counter() - started:.1f}s", file=out)

        submitted = time.perf_counter()
        batch = client.submit(triples)
        print(f"submitted {len(triples)} triples from {len(files)} seed reports as batch {batch.id}", file=out)
        final = client.wait(batch.id, poll_s=0.5, on_progress=BatchProgressPrinter(out))
        graded_s = time.perf_counter() - submitted
        order = {t.id: n for n, t in enumerate(triples)}
        judgements = sorted(client.results(batch.id), key=lambda j: order.get(j.id, len(order)))
        print("", results_table(judgements), "", sep="\n", file=out)
        # Kept beside the logs: the demo's Redis (or queue) is gone once it ends, and with it each grade's evidence.
        write_judgements(judgements, workdir / "results.jsonl")
        write_report(judgements, workdir / "report.md")
        print(f"results: {workdir / 'results.jsonl'}; the seeds' report: {workdir / 'report.md'}", file=out)
        print(format_agreement(client.agreement(batch.id)), file=out)
        print(
            f"\n{final.counts.done} graded ({final.status.value}) in {graded_s:.1f}s after submission; "
            f"{time.perf_counter() - started:.1f}s end to end, start-up included",
            file=out,
        )
        if sys.stdin.isatty():  # someone is watching: keep the stack up for the web page until Ctrl-C
            print(f"\nweb page: http://127.0.0.1:{port}/ui (key {key}); Ctrl-C stops everything", file=out, flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    api.check()
                    time.sleep(1)
    return 0 if final.status.value == "done" else 1
