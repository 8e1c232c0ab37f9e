"""Settings from the environment, API keys, GPU selection: the configuration the service processes start from."""

from __future__ import annotations

import pytest

from juiz.runtime.errors import InputError
from juiz.runtime.settings import Settings, settings_table
from service.auth import tenant_for
from workers.gpus import select_gpus


def test_settings_read_juiz_variables_and_name_a_bad_one() -> None:
    settings = Settings.from_env({"JUIZ_CHUNK_SIZE": "8", "JUIZ_RESULT_CACHE": "false", "OTHER": "x"})
    assert settings.chunk_size == 8 and settings.result_cache is False
    assert settings.max_items == 100_000 and settings.max_body_bytes == 64 * 2**20 and settings.grade_timeout_s == 60
    with pytest.raises(InputError) as error:
        Settings.from_env({"JUIZ_CHUNK_SIZE": "zero"})
    assert error.value.source == "JUIZ_CHUNK_SIZE"
    with pytest.raises(InputError, match="heartbeat_ttl_s"):
        Settings.from_env({"JUIZ_HEARTBEAT_TTL_S": "5", "JUIZ_HEARTBEAT_INTERVAL_S": "10"})


def test_api_keys_map_to_tenants_and_stay_out_of_repr() -> None:
    settings = Settings.from_env({"JUIZ_API_KEYS": "alice:s3cret-a, bob:s3cret-b"})
    assert settings.tenants_by_key == {"s3cret-a": "alice", "s3cret-b": "bob"}
    assert "s3cret" not in repr(settings) and "s3cret" not in str(settings)
    assert "s3cret" not in str(settings.model_dump()) and "s3cret" not in settings.model_dump_json()
    assert tenant_for("s3cret-b", settings.tenants_by_key) == "bob"
    assert tenant_for("s3cret", settings.tenants_by_key) is None
    with pytest.raises(InputError) as error:
        Settings.from_env({"JUIZ_API_KEYS": "alice:k,bob"})
    assert error.value.source == "JUIZ_API_KEYS" and "entry 2" in str(error.value)
    with pytest.raises(InputError, match="repeats a key"):
        Settings.from_env({"JUIZ_API_KEYS": "alice:k,bob:k"})


def test_from_env_reads_the_process_environment_when_given_no_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUIZ_PORT", "9001")
    assert Settings.from_env().port == 9001
    assert Settings.from_env({}).port == 8000  # a mapping replaces os.environ
    assert Settings.from_env(port=9002).port == 9002  # keyword overrides win


def test_every_setting_is_documented() -> None:
    table = settings_table()
    for name, field in Settings.model_fields.items():
        assert f"`JUIZ_{name.upper()}`" in table and field.description


def test_gpu_selection() -> None:
    assert select_gpus(None) == [] and select_gpus("none") == []
    assert select_gpus("0,1") == ["0", "1"]
    with pytest.raises(InputError):
        select_gpus("first")
