"""The `juiz` console script: the core's commands (`juiz.cli`) and the ones that run the service — `serve`, `worker`,
`demo`. Those import `service/` and `workers/`, so they live here, in a package above both, and the core package
`juiz/` imports neither (tests/unit/test_layers.py checks it).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from juiz import cli


def _add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("serve", help="run the HTTP API (configured by JUIZ_* environment variables)")
    serve.add_argument("--host", default=None, help="address to listen on (default: JUIZ_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port to listen on (default: JUIZ_PORT or 8000)")


def _serve(args: argparse.Namespace) -> int:
    from service.server import serve

    return serve(host=args.host, port=args.port)


def _add_worker(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    worker = sub.add_parser("worker", help="run a grading worker: one vLLM engine per process, jobs from Redis")
    worker.add_argument(
        "--gpus", default=None, help="'all' or indices like 0,1: one worker per GPU (default: one worker, CPU or GPU)"
    )
    worker.add_argument("--burst", action="store_true", help="quit when the queues are empty")


def _worker(args: argparse.Namespace) -> int:
    from workers.gpus import launch, select_gpus

    return launch(select_gpus(args.gpus), burst=args.burst)


def _add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser("demo", help="run Redis, the API and a worker locally and grade the seeds over HTTP")
    demo.add_argument("--seeds", type=Path, default=None, help="folder of seed reports (default: examples/seeds)")


def _demo(args: argparse.Namespace) -> int:
    from service.demo import SEEDS, run_demo

    return run_demo(args.seeds or SEEDS)


SERVICE_COMMANDS = (
    cli.Command("serve", _add_serve, _serve),
    cli.Command("worker", _add_worker, _worker),
    cli.Command("demo", _add_demo, _demo),
)


def build_parser() -> argparse.ArgumentParser:
    return cli.build_parser(SERVICE_COMMANDS)


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(argv, SERVICE_COMMANDS)
