"""Layers one way (issue 16 item 3): the core package `juiz/` imports neither the service nor the workers, and reads
no JUIZ_* variable outside `juiz.settings`."""

from __future__ import annotations

import ast
import re
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "juiz"
OUTER = ("service", "workers")


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


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


def test_the_walk_sees_imports_inside_functions(tmp_path: Path) -> None:
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
    back_ends = {"juiz.openai_engine"}
    found = [name for _, name in _imports(CORE / "judge.py") if name in back_ends]
    assert not found, found
