"""`ThreadDeathPenalty`: bounds a failure callback run off the main thread (a job's heartbeat thread), and leaves the
message of RQ's JobTimeoutException alone (RQ's TimerDeathPenalty rewrites it for every later timeout)."""

from __future__ import annotations

import threading
import time

from rq.timeouts import JobTimeoutException

from workers.worker import ThreadDeathPenalty


def test_it_stops_a_callback_off_the_main_thread_with_rqs_timeout_exception() -> None:
    caught: list[BaseException] = []

    def callback() -> None:
        try:
            with ThreadDeathPenalty(1, JobTimeoutException):
                deadline = time.monotonic() + 30  # guards against a hang: the penalty ends this loop after 1 s
                while time.monotonic() < deadline:
                    time.sleep(0.01)
        except JobTimeoutException as exc:
            caught.append(exc)

    thread = threading.Thread(target=callback)
    thread.start()
    thread.join(timeout=60)
    assert len(caught) == 1 and "(1 seconds)" in str(caught[0])


def test_it_leaves_the_message_of_a_jobs_own_timeout_alone() -> None:
    with ThreadDeathPenalty(60, JobTimeoutException):
        pass
    assert "(900 seconds)" in str(JobTimeoutException("Task exceeded maximum timeout value (900 seconds)"))
