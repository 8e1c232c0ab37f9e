"""schemathesis against juiz's own OpenAPI document: generated requests, valid and invalid, to every
operation; no 5xx, and every status, content type and body the API answers is the one its document declares.

Bounded (a few dozen examples per operation, no deadline) so it runs in `make test`. No worker runs: batches stay
queued, ids that don't exist are 404, and /v1/grade answers 202 after its short timeout. schemathesis' "valid data
must be accepted" check is left out: whether a schema-valid body is accepted also depends on settings and server
state the document can't express (prompt ids that exist, the configured character limits, nesting depth).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from litestar import Litestar
from redis import Redis
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.generation.meta import negated_parameters
from schemathesis.specs.openapi.checks import positive_data_acceptance

from service.app import create_app
from tests.integration.helpers import make_settings

KEY = "schemathesis-key"
MAX_EXAMPLES = 25  # per operation and mode: ~14 operations x 2 modes, about a minute on 2 cores


@pytest.fixture
def api(redis_url: str, redis: Any) -> Litestar:
    return create_app(make_settings(redis_url, api_keys=f"fuzz:{KEY}", grade_timeout_s=0.05))


def check(operation: Any, mode: GenerationMode) -> Callable[[], None]:
    """A hypothesis test drawing requests for one operation in one mode and validating each answer."""

    @given(data=st.data())
    @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def run(data: st.DataObject) -> None:
        case = data.draw(operation.as_strategy(generation_mode=mode))
        excluded = [positive_data_acceptance]
        if operation.label == "GET /ready":
            excluded.append(not_a_server_error)  # its documented 503: no worker runs in this test
        # A negative case may drop the security scheme's Authorization header on purpose: send it without the key
        # then (the API must answer 401), never put the key back and turn the invalid request into a valid one.
        negated = {name.lower() for name, _ in negated_parameters(case.meta)}
        headers = {} if "authorization" in negated else {"Authorization": f"Bearer {KEY}"}
        case.call_and_validate(headers=headers, excluded_checks=excluded)

    return run  # type: ignore[no-any-return]


def test_api_conforms_to_its_openapi_document(api: Litestar, redis: Redis) -> None:
    schema = schemathesis.openapi.from_asgi("/schema/openapi.json", api)
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
    assert len(operations) >= 10
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                check(operation, mode)()
            except Unsatisfiable:  # nothing to make invalid: the operation takes no parameters and no body
                assert mode is GenerationMode.NEGATIVE, operation.label
            except Exception as exc:  # one report per operation and mode, all collected before failing
                failures.append(f"{operation.label} [{mode.value}]: {exc}")
    assert not failures, "\n\n".join(failures)
    # The document's bodies are real: requests generated from it get through intake and are stored.
    assert redis.keys("juiz:batch:*"), "no generated request reached a 202"
