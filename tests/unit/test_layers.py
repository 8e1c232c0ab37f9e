"""Layers one way: `juiz/` is a stack of groups, each importing only the groups below it; the core package imports
neither the service nor the workers, and reads no JUIZ_* variable outside its settings module."""

from __future__ import annotations

import ast
import re
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "juiz"
OUTER = ("service", "workers")
# juiz's groups, bottom first; a group imports only groups of a lower rank (and itself). Groups of the same rank
# (calibration sits on agreement's statistics, so it ranks above it) may not import each other.
LAYERS: dict[str, int] = {
    "runtime": 0,  # settings, the error tree, retries, child processes
    "engines": 1,  # the JudgeEngine protocol and its back ends, the development models
    "agreement": 2,  # labels on the judge's classes, agreement statistics, comparisons, the CI gate
    "calibration": 3,  # the judge fitted to people's labels
    "judging": 4,  # the procedure: plan, conversations, checks, rule, results
    "formats": 5,  # readers and writers: JSONL/CSV/JSON, the seeds' markdown report, options as text
    "store": 6,  # Redis: batches, chunks, results, labels, the sweeper
    "clients": 7,  # the HTTP API's clients and the pytest helper
}
# The package's entry points: not a group, free to import any.
ENTRY_POINTS = {"__init__.py", "cli.py"}


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def _group(path: Path) -> str | None:
    relative = path.relative_to(CORE)
    return relative.parts[0] if len(relative.parts) > 1 else None


def test_the_core_imports_neither_service_nor_workers() -> None:
    modules = sorted(CORE.rglob("*.py"))
    assert len(modules) > 10
    upward = [
        f"{path.relative_to(CORE.parent)}:{line} imports {name}"
        for path in modules
        for line, name in _imports(path)
        if name.split(".")[0] in OUTER
    ]
    assert not upward, "\n".join(upward)


def test_every_module_but_the_entry_points_is_in_a_group() -> None:
    loose = [p.name for p in CORE.glob("*.py") if p.name not in ENTRY_POINTS]
    assert not loose, loose
    groups = {p.name for p in CORE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert groups == set(LAYERS), groups ^ set(LAYERS)


def test_groups_import_only_groups_below_them() -> None:
    upward = []
    for path in sorted(CORE.rglob("*.py")):
        group = _group(path)
        if group is None:
            continue
        for line, name in _imports(path):
            parts = name.split(".")
            if parts[0] != "juiz" or len(parts) < 2 or parts[1] not in LAYERS or parts[1] == group:
                continue
            if LAYERS[parts[1]] >= LAYERS[group]:
                upward.append(f"{path.relative_to(CORE.parent)}:{line} ({group}) imports {name}")
    assert not upward, "\n".join(upward)


def test_an_import_up_a_layer_is_seen(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from service.server import serve\n    import workers.worker\n")
    assert [name for _, name in _imports(module)] == ["service.server", "workers.worker"]


def test_juiz_variables_are_read_in_settings_only() -> None:
    read = re.compile(r"""(environ(\.get)?\(|environ\[|getenv\()\s*["']JUIZ_""")
    offenders = [
        f"{path.relative_to(CORE.parent)}:{number}"
        for path in sorted(CORE.rglob("*.py"))
        if path.name != "settings.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if read.search(line)
    ]
    assert not offenders, offenders


def test_the_console_script_has_the_service_commands() -> None:
    from juiz_cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert {"score", "agreement", "serve", "worker", "demo"} <= set(commands)


def test_the_judge_imports_no_engine_back_end() -> None:
    """Engines carry their own origin (JudgeEngine.origin): the judge knows the Protocol, not a back end."""
    back_ends = {"juiz.engines.openai_server", "juiz.engines.vllm_engine"}
    found = [name for _, name in _imports(CORE / "judging" / "judge.py") if name in back_ends]
    assert not found, found


# Commands only a Redis client has: called outside juiz/store, one of them would be a second way to Redis.
REDIS_COMMAND = re.compile(
    r"\.(hget|hset|hgetall|hmget|hincrby|hdel|zadd|zrange|zrangebyscore|zrevrange|zrem|zcard|sadd|srem|smembers|"
    r"xadd|xread|xrevrange|evalsha|register_script|lrange|llen|rpush|lpush|incrby|setnx|scan_iter)\("
)


def test_redis_is_reached_through_the_store() -> None:
    """No module outside juiz/store sends Redis a command itself, and the workers' retries of store steps are the
    store's (juiz.store.retrying), not call sites wrapping lambdas in `while_redis_away(`."""
    root = CORE.parent
    sources = [p for d in ("juiz", *OUTER, "juiz_cli") for p in (root / d).rglob("*.py") if "store" not in p.parts]
    calls = [
        f"{p.relative_to(root)}:{n}: {line.strip()}"
        for p in sources
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if REDIS_COMMAND.search(line)
    ]
    assert calls == []
    wrapped = [
        str(p.relative_to(root)) for p in (root / "workers").rglob("*.py") if "while_redis_away(" in p.read_text()
    ]
    assert wrapped == []
