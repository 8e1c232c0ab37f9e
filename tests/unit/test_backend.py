"""`juiz.judging.backend.build_engine`, the one builder `juiz score`/`juiz check` and the worker share (it
was two,
and the CLI's vLLM engine ignored JUIZ_MAX_MODEL_LEN). The engine classes are replaced by FAKE ones that record how
they were built: no model is loaded and no server is reached."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from juiz.cli import main
from juiz.engines import openai_server as openai_engine
from juiz.engines import vllm_engine
from juiz.engines.base import Conversation
from juiz.engines.fake import FakeEngine
from juiz.judging import backend
from juiz.runtime.errors import InputError
from juiz.runtime.settings import Settings
from workers import worker

COT = ["--prompt", "answer_relevance@juiz-1"]  # replies the fake can give as text: no probabilities read


def _reply(conversation: Conversation) -> str:
    return "Criteria: c\nSupporting Evidence: e\nScore: 3"


class FakeVLLM(FakeEngine):
    """A FAKE in-process engine: records the arguments juiz.engines.vllm_engine.VLLMEngine would have been given."""

    def __init__(self, model: str, *, model_id: str, **kwargs: Any) -> None:
        super().__init__(_reply, model_id=model_id)
        self.model, self.kwargs, self.startup_s = model, kwargs, 0.0


class FakeServer(FakeEngine):
    """A FAKE judge-server client: records the arguments juiz.engines.openai_server.OpenAIEngine would have been
    given."""

    def __init__(self, base_url: str, model: str, **kwargs: Any) -> None:
        super().__init__(_reply, model_id=model)
        self.base_url, self.kwargs, self.dialect = base_url, kwargs, "vllm"


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[FakeEngine]]:
    """Every engine built during the test, in order; the environment holds no JUIZ_* variable of the machine's."""
    for name in [n for n in os.environ if n.startswith("JUIZ_")]:
        monkeypatch.delenv(name)
    engines: list[FakeEngine] = []

    def recording(cls: type[FakeEngine]) -> Callable[..., FakeEngine]:
        def build(*args: Any, **kwargs: Any) -> FakeEngine:
            engines.append(cls(*args, **kwargs))
            return engines[-1]

        return build

    monkeypatch.setattr(vllm_engine, "VLLMEngine", recording(FakeVLLM))
    monkeypatch.setattr(openai_engine, "OpenAIEngine", recording(FakeServer))
    root = logging.getLogger()
    level = root.level
    yield engines
    root.setLevel(level)  # the worker's main sets the root logger's level


def _run_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker, "run", lambda settings, engine, **kwargs: True)  # no Redis: building is the point
    assert worker.main([]) == 0


def _run_juiz_score(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text('{"id": "a", "question": "Q?", "answer": "A."}\n', encoding="utf-8")
    assert main(["score", str(items), "-o", str(tmp_path / "out.jsonl"), *COT]) == 0


@pytest.mark.parametrize("run", [_run_worker, _run_juiz_score], ids=["worker", "juiz score"])
def test_both_callers_load_the_configured_model_and_context_length(
    run: Callable[[Path, pytest.MonkeyPatch], None],
    built: list[FakeEngine],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JUIZ_MODEL", "org/judge")
    monkeypatch.setenv("JUIZ_MAX_MODEL_LEN", "2048")
    monkeypatch.setenv("JUIZ_DTYPE", "float32")
    monkeypatch.setenv("JUIZ_ENFORCE_EAGER", "0")
    monkeypatch.setenv("JUIZ_CPU_STEP_TOKENS", "512")
    run(tmp_path, monkeypatch)
    [engine] = built
    assert isinstance(engine, FakeVLLM)
    assert engine.model == "org/judge" and engine.model_id == "org/judge"
    assert engine.kwargs["max_model_len"] == 2048 and engine.kwargs["cpu_step_tokens"] == 512
    assert engine.kwargs["dtype"] == "float32" and engine.kwargs["enforce_eager"] is False
    assert engine.calls, "warmed up before it is handed over"


def test_the_builders_settings_reach_the_engine_not_the_environment(
    built: list[FakeEngine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine reads no JUIZ_* variable itself: settings built in code (bench, tests, a CLI flag) are what it gets,
    and "auto" leaves the eager mode to the device (None)."""
    monkeypatch.setenv("JUIZ_DTYPE", "float16")
    monkeypatch.setenv("JUIZ_ENFORCE_EAGER", "0")
    settings = Settings.from_env({}, model="org/judge", dtype="bfloat16", enforce_eager="auto")
    backend.build_engine(settings, say=lambda line: None)
    [engine] = built
    assert engine.kwargs["dtype"] == "bfloat16" and engine.kwargs["enforce_eager"] is None


def test_cli_model_flag_names_the_served_model_and_a_base_url_means_a_server(
    built: list[FakeEngine], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUIZ_ENGINE_MODEL", "from-env")
    items = tmp_path / "items.jsonl"
    items.write_text('{"id": "a", "question": "Q?", "answer": "A."}\n', encoding="utf-8")
    argv = ["score", str(items), "-o", str(tmp_path / "out.jsonl"), "--base-url", "http://judge:8000/v1", *COT]
    assert main([*argv, "--model", "served"]) == 0
    assert main(argv) == 0
    assert [(type(e), getattr(e, "base_url", None), e.model_id) for e in built] == [
        (FakeServer, "http://judge:8000/v1", "served"),
        (FakeServer, "http://judge:8000/v1", "from-env"),
    ]


@pytest.mark.parametrize(
    ("flags", "env", "named"),
    [
        ([], {"JUIZ_ENGINE": "bogus"}, "JUIZ_ENGINE"),
        (["--engine", "openai"], {}, "JUIZ_ENGINE_BASE_URL"),
    ],
    ids=["unknown back end", "server without a URL"],
)
def test_a_bad_back_end_is_one_line_and_exit_2_before_anything_starts(
    flags: list[str],
    env: dict[str, str],
    named: str,
    built: list[FakeEngine],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    items = tmp_path / "items.jsonl"
    items.write_text('{"id": "a", "question": "Q?", "answer": "A."}\n', encoding="utf-8")
    assert main(["score", str(items), "-o", str(tmp_path / "out.jsonl"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("juiz: error:") and named in err and "Traceback" not in err
    assert built == []


def test_a_back_end_the_builder_does_not_know_never_starts_another(built: list[FakeEngine]) -> None:
    settings = Settings.from_env().model_copy(update={"engine": "sglang"})  # past validation, as a new field would be
    with pytest.raises(InputError, match="unknown judge back end 'sglang'"):
        backend.build_engine(settings)
    assert built == []


def test_the_worker_started_with_a_bad_setting_says_which_in_one_line(
    built: list[FakeEngine], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("JUIZ_ENGINE", "bogus")  # as `python -m workers.worker` meets it
    assert worker.main([]) == worker.BAD_SETTING_EXIT
    err = capsys.readouterr().err
    assert err.startswith("juiz-worker: error:") and "JUIZ_ENGINE" in err and "Traceback" not in err
    assert built == []
