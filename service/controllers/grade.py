"""/v1/grade: one triple, answered synchronously when a worker is quick enough."""

from __future__ import annotations

import time
from functools import partial

import anyio
from litestar import Controller, Response, post
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.openapi import ResponseSpec
from litestar.params import JSONBody

from juiz.store import Store
from schemas import BatchView, Judgement
from service import progress
from service.intake import GradeRequestBody, accept_grade_request
from service.openapi import SECURITY, responses
from service.views import batch_view

WAIT_MAX_S = 5.0  # one blocking read at most this long, so a request never outlives its deadline by much


class GradeController(Controller):
    path = "/v1/grade"
    tags = ["grade"]  # noqa: RUF012 - Litestar reads it as a class attribute
    security = SECURITY

    @post(
        "/",
        operation_id="gradeOne",
        status_code=200,
        responses={
            202: ResponseSpec(
                data_container=BatchView,
                description="Not graded within grade_timeout_s: its one-item batch, to follow (Location header).",
                generate_examples=False,
            ),
            **responses(401, 413, 415, 422, 429, 503),
        },
        summary="Grade one triple now",
    )
    async def grade_one(
        self,
        state: State,
        store: NamedDependency[Store],
        tenant: NamedDependency[str],
        data: JSONBody[GradeRequestBody],
    ) -> Response[Judgement]:
        """Grade one triple (`{"item": {...}, "options": {...}}`) on the priority queue workers serve first.
        200 with the judgement when it is ready within `grade_timeout_s`; otherwise 202 with its one-item batch,
        whose results can be fetched later."""
        triple, options = await anyio.to_thread.run_sync(accept_grade_request, data, state.settings)
        record, _ = await anyio.to_thread.run_sync(
            partial(store.create_batch, tenant, options, [triple], priority=True)
        )
        deadline = time.monotonic() + state.settings.grade_timeout_s
        cursor = progress.START
        while True:
            results = await anyio.to_thread.run_sync(store.read_results, record.id, 0, 1)
            if results:
                return Response(results[0], status_code=200)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            # Wakes when the result is stored (the batch's progress event), not on a timer.
            cursor = await progress.wait_for_progress(state.store.reads, record.id, cursor, min(remaining, WAIT_MAX_S))
        latest = await anyio.to_thread.run_sync(store.get_batch, record.id)
        view = batch_view(latest or record)
        return Response(view, status_code=202, headers={"Location": view.links.self})  # type: ignore[arg-type]
