"""The child-process helpers behind `juiz demo` and the benchmarks, with real processes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from juiz.runtime.errors import StartError
from juiz.runtime.processes import child, private_redis, redis_pings, wait_until

pytestmark = pytest.mark.integration


def test_private_redis_answers_and_is_stopped(tmp_path: Path) -> None:
    with private_redis(tmp_path, {}) as (url, redis):
        assert redis_pings(url)
    assert redis.process.poll() is not None
    assert not redis_pings(url)


def test_a_child_that_dies_is_reported_with_its_log(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "print('bad config: JUIZ_X'); raise SystemExit(3)"]
    with child("worker", command, {}, tmp_path / "worker.log") as worker, pytest.raises(StartError) as failure:
        wait_until(lambda: False, 30, [worker], "a worker")
    assert "worker exited with 3" in str(failure.value) and "bad config: JUIZ_X" in str(failure.value)


def test_a_child_is_stopped_on_the_way_out(tmp_path: Path) -> None:
    with child("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"], {}, tmp_path / "s.log") as sleeper:
        assert sleeper.process.poll() is None
    assert sleeper.process.poll() is not None
