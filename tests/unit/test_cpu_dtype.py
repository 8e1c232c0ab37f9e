"""The CPU engine's dtype: float32 where the CPU would emulate bf16, the model's own where it computes bf16 natively
(bench/cpu_dtype.py measures the difference), and always what the operator set (`JUIZ_DTYPE`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from juiz.engines.vllm_engine import cpu_dtype, cpu_step, engine_dtype, model_dtype
from juiz.runtime.errors import InputError
from juiz.runtime.settings import Settings

AVX2 = frozenset({"avx", "avx2", "fma"})


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (AVX2, "float32"),  # AMD EPYC without AVX-512 (this project's machines, some days)
        (AVX2 | {"avx512f", "avx512bw"}, "float32"),  # AVX-512 without BF16: bf16 is still emulated
        (AVX2 | {"avx512f", "avx512_bf16"}, None),  # Zen 4, Cooper Lake: native bf16, the model's own dtype
        (AVX2 | {"amx_bf16", "amx_tile"}, None),  # Sapphire Rapids
    ],
)
def test_auto_runs_float32_only_where_bf16_would_be_emulated(flags: frozenset[str], expected: str | None) -> None:
    assert cpu_dtype("auto", machine="x86_64", flags=flags) == expected


def test_auto_leaves_other_architectures_to_vllm() -> None:
    assert cpu_dtype("auto", machine="aarch64", flags=frozenset()) is None


def test_the_operator_wins() -> None:
    assert cpu_dtype("bfloat16", machine="x86_64", flags=AVX2) == "bfloat16"
    assert cpu_dtype("float32", machine="x86_64", flags=AVX2 | {"amx_bf16"}) == "float32"


def test_the_setting_names_the_wrong_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUIZ_DTYPE", "fp8")
    with pytest.raises(InputError) as raised:
        Settings.from_env()
    assert raised.value.source == "JUIZ_DTYPE"


def test_a_gpu_runs_the_models_own_dtype_unless_the_operator_says() -> None:
    assert engine_dtype("auto", on_gpu=True) is None
    assert engine_dtype("float16", on_gpu=True) == "float16"


@pytest.mark.parametrize(
    ("configured", "dtype", "expected"),
    [(None, "bfloat16", 1024), (None, "float32", 512), (None, None, 512), (0, "float32", 0), (2048, "bfloat16", 2048)],
)
def test_a_cpu_step_is_sized_to_the_dtype_unless_the_operator_says(
    configured: int | None, dtype: str | None, expected: int
) -> None:
    """float32 computes about half as many prompt tokens a second as bf16: half the step keeps it as short."""
    assert cpu_step(configured, dtype) == expected


def test_with_no_dtype_asked_for_the_step_follows_the_models_own(tmp_path: Path) -> None:
    """On a CPU with native bf16 juiz asks vLLM for no dtype, and vLLM runs the model's own: its step is that one's."""
    (tmp_path / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16"}), encoding="utf-8")
    assert model_dtype(str(tmp_path)) == "bfloat16"
    assert cpu_step(None, model_dtype(str(tmp_path))) == 1024
    assert model_dtype(str(tmp_path / "missing")) is None and model_dtype("Qwen/Qwen2.5-1.5B") is None


def test_the_step_setting_is_unset_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JUIZ_CPU_STEP_TOKENS", raising=False)
    assert Settings.from_env().cpu_step_tokens is None
    monkeypatch.setenv("JUIZ_CPU_STEP_TOKENS", "0")
    assert Settings.from_env().cpu_step_tokens == 0


def test_settings_passed_on_as_environment_variables_come_back_the_same() -> None:
    """How the tests and bench.scale_out hand settings to worker processes: an unset setting stays unset."""
    from tests.integration.fake_workers import settings_env

    settings = Settings.from_env({})
    assert Settings.from_env(settings_env(settings)) == settings
