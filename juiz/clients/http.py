"""Clients for juiz's HTTP API, for scripts and RAG pipelines: `JuizClient` (sync) and `AsyncJuizClient` (asyncio).

    from juiz.clients import JuizClient

    with JuizClient("http://localhost:8000", api_key="…") as juiz:
        batch = juiz.submit(triples)                     # Triple objects or plain dicts
        juiz.wait(batch.id, on_progress=print)           # until done / failed / cancelled
        for judgement in juiz.results(batch.id):         # completion order
            ...
        print(juiz.report(batch.id))

    from juiz.clients import AsyncJuizClient

    async with AsyncJuizClient("http://localhost:8000", api_key="…") as juiz:
        batch = await juiz.submit(triples)
        await juiz.wait(batch.id)
        async for judgement in juiz.results(batch.id):
            ...

Both share one implementation (sans-IO): `_Requests` builds each call (method, path, body, headers, how to read the
answer), `_interpret` turns a response into a result or an `ApiError`, `_retrying` is the one retry policy; the two
classes only send. Submissions carry an Idempotency-Key, so `submit` retries a dropped connection without creating a
second batch. 429 and 503 are retried (tenacity), waiting what the server's Retry-After says.
Errors: `ApiError` (a `JuizError`) with the HTTP status and the server's body, which names the field at fault.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx
from tenacity import AsyncRetrying, Retrying, retry_if_exception, stop_after_attempt

from juiz.runtime.errors import JuizError
from juiz.runtime.retry import WaitRetryAfter, retry_after_s
from schemas import (
    AgreementByMetric,
    AgreementReport,
    BatchOptions,
    BatchStatus,
    BatchView,
    CalibrationSpec,
    Judgement,
    ReadyView,
    Triple,
)
from schemas.compare import CompareReport

NDJSON = "application/x-ndjson"
TERMINAL = (BatchStatus.DONE, BatchStatus.FAILED, BatchStatus.CANCELLED)
RETRY_STATUSES = (429, 503)  # the server asks to come back later (rate limit, not ready): nothing was done

T = TypeVar("T")


class ApiError(JuizError):
    """The API answered with an error status."""

    def __init__(self, status_code: int, body: Any, retry_after_s: float | None = None) -> None:
        self.status_code = status_code
        self.body = body
        self.retry_after_s = retry_after_s
        detail = body.get("detail") if isinstance(body, dict) else body
        field = body.get("field") if isinstance(body, dict) else None
        super().__init__(f"HTTP {status_code}: {detail}" + (f" (field {field})" if field else ""))


# --- the shared core: what to send, how to read what comes back --------------------------------------------------


@dataclass(frozen=True)
class Call(Generic[T]):
    """One API request and how to read its answer; sent by either client."""

    method: str
    url: str
    read: Callable[[httpx.Response], T]
    params: dict[str, Any] | None = None
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    idempotent: bool = True  # safe to send again after a dropped connection
    answers: tuple[int, ...] = ()  # error statuses that are answers, not errors (GET /ready: 503)


def _interpret(call: Call[T], response: httpx.Response) -> T:
    if response.status_code >= 400 and response.status_code not in call.answers:
        raise ApiError(response.status_code, _body(response), retry_after_s(response.headers.get("Retry-After")))
    return call.read(response)


def _retryable(call: Call[Any]) -> Callable[[BaseException], bool]:
    def retryable(exc: BaseException) -> bool:
        if isinstance(exc, ApiError):
            return exc.status_code in RETRY_STATUSES and exc.status_code not in call.answers
        return call.idempotent and isinstance(exc, httpx.TransportError)

    return retryable


def _retrying(call: Call[Any], retries: int) -> dict[str, Any]:
    """The one retry policy, as keyword arguments for tenacity's Retrying and AsyncRetrying."""
    return {
        "retry": retry_if_exception(_retryable(call)),
        "wait": WaitRetryAfter(initial_s=0.5, max_s=8.0),
        "stop": stop_after_attempt(1 + retries),
        "reraise": True,
    }


class _Requests:
    """Every API call juiz's clients make, as `Call`s; no I/O here."""

    def __init__(self, api_key: str | None) -> None:
        self.auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def submit(
        self,
        items: Iterable[Triple | Mapping[str, Any]],
        options: BatchOptions | Mapping[str, Any] | None,
        idempotency_key: str | None,
        field_map: str | Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> Call[BatchView]:
        body: dict[str, Any] = {"items": [_item(t) for t in items], "options": _options(options)}
        if name is not None:
            body["name"] = name
        if field_map is not None:
            body["field_map"] = field_map if isinstance(field_map, str) else dict(field_map)
        # The key makes a resent POST the same batch: retrying a dropped connection is safe.
        headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}
        return Call("POST", "/v1/batches", _view, json=body, headers=headers)

    def batch(self, batch_id: str) -> Call[BatchView]:
        return Call("GET", f"/v1/batches/{batch_id}", _view)

    def results_page(self, batch_id: str, cursor: str, limit: int) -> Call[dict[str, Any]]:
        params = {"cursor": cursor, "limit": limit}
        return Call("GET", f"/v1/batches/{batch_id}/results", _json, params=params)

    def agreement(self, batch_id: str, resamples: int) -> Call[AgreementReport]:
        return Call(
            "GET",
            f"/v1/batches/{batch_id}/agreement",
            lambda r: AgreementReport.model_validate(r.json()),
            params={"resamples": resamples},
        )

    def agreement_by_metric(self, batch_id: str, resamples: int) -> Call[AgreementByMetric]:
        return Call(
            "GET",
            f"/v1/batches/{batch_id}/agreement/metrics",
            lambda r: AgreementByMetric.model_validate(r.json()),
            params={"resamples": resamples},
        )

    def calibration(self, batch_id: str, folds: int) -> Call[CalibrationSpec]:
        return Call(
            "GET",
            f"/v1/batches/{batch_id}/calibration",
            lambda r: CalibrationSpec.model_validate(r.json()),
            params={"folds": folds},
        )

    def report(self, batch_id: str) -> Call[str]:
        return Call("GET", f"/v1/batches/{batch_id}/report", lambda r: r.text)

    def rename(self, batch_id: str, name: str) -> Call[BatchView]:
        return Call("PATCH", f"/v1/batches/{batch_id}", _view, json={"name": name})

    def compare(self, a: str, b: str, resamples: int) -> Call[CompareReport]:
        return Call(
            "GET",
            "/v1/compare",
            lambda r: CompareReport.model_validate(r.json()),
            params={"a": a, "b": b, "resamples": resamples},
        )

    def cancel(self, batch_id: str) -> Call[BatchView]:
        return Call("DELETE", f"/v1/batches/{batch_id}", _view)

    def grade(
        self, item: Triple | Mapping[str, Any], options: BatchOptions | Mapping[str, Any] | None
    ) -> Call[Judgement | BatchView]:
        body = {"item": _item(item), "options": _options(options)}
        return Call("POST", "/v1/grade", _graded, json=body, idempotent=False)

    def ready(self) -> Call[ReadyView]:
        return Call("GET", "/ready", lambda r: ReadyView.model_validate(r.json()), answers=(503,))

    def stream(self, batch_id: str, follow: bool) -> Call[None]:
        params = {"follow": "true" if follow else "false"}
        return Call("GET", f"/v1/batches/{batch_id}/results", lambda r: None, params=params, headers={"Accept": NDJSON})

    def send_kwargs(self, call: Call[Any]) -> dict[str, Any]:
        return {"params": call.params, "json": call.json, "headers": {**self.auth, **call.headers}}


class _Pager:
    """Cursor paging of /results: which page to ask for next, and when there is no more."""

    def __init__(self, requests: _Requests, batch_id: str, page_size: int) -> None:
        self.requests, self.batch_id, self.page_size = requests, batch_id, page_size
        self.cursor: str | None = ""

    def next_call(self) -> Call[dict[str, Any]] | None:
        return None if self.cursor is None else self.requests.results_page(self.batch_id, self.cursor, self.page_size)

    def feed(self, page: dict[str, Any]) -> list[Judgement]:
        items = [Judgement.model_validate(item) for item in page["items"]]
        # An empty page means nothing more now; a running batch would give the same cursor again.
        self.cursor = page["next_cursor"] if items else None
        return items


class _Waiter:
    """When to stop polling a batch: it is over, or the caller's timeout has passed (TimeoutError)."""

    def __init__(self, batch_id: str, timeout_s: float | None, on_progress: Callable[[BatchView], None] | None) -> None:
        self.batch_id, self.timeout_s, self.on_progress = batch_id, timeout_s, on_progress
        self.deadline = None if timeout_s is None else time.monotonic() + timeout_s

    def over(self, view: BatchView) -> bool:
        if self.on_progress is not None:
            self.on_progress(view)
        if view.status in TERMINAL:
            return True
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise TimeoutError(f"batch {self.batch_id} still {view.status.value} after {self.timeout_s}s")
        return False


def _item(item: Triple | Mapping[str, Any]) -> dict[str, Any]:
    return item.model_dump(mode="json", exclude_none=True) if isinstance(item, Triple) else dict(item)


def _options(options: BatchOptions | Mapping[str, Any] | None) -> dict[str, Any]:
    if options is None:
        return {}
    if isinstance(options, BatchOptions):
        return options.model_dump(mode="json", exclude_defaults=True)
    return dict(options)


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text


def _json(response: httpx.Response) -> Any:
    return response.json()


def _view(response: httpx.Response) -> BatchView:
    return BatchView.model_validate(response.json())


def _graded(response: httpx.Response) -> Judgement | BatchView:
    """POST /v1/grade: the judgement, or (202, past the server's timeout) the batch to fetch it from later."""
    if response.status_code == 202:
        return BatchView.model_validate(response.json())
    return Judgement.model_validate(response.json())


def _judgement_line(line: str) -> Judgement | None:
    return Judgement.model_validate_json(line) if line.strip() else None


# --- the two clients: they only send ------------------------------------------------------------------------------


class JuizClient:
    """The synchronous client."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        api_key: str | None = None,
        *,
        timeout_s: float = 120.0,
        retries: int = 2,
        http: httpx.Client | None = None,
    ) -> None:
        """`http` lets a caller bring its own client (a test client, a proxy set-up); it is not closed here."""
        self._requests = _Requests(api_key)
        self._own = http is None
        self._http = http or httpx.Client(base_url=base_url, timeout=timeout_s)
        self._retries = retries

    def __enter__(self) -> JuizClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._own:
            self._http.close()

    def _run(self, call: Call[T]) -> T:
        for attempt in Retrying(**_retrying(call, self._retries)):
            with attempt:
                response = self._http.request(call.method, call.url, **self._requests.send_kwargs(call))
                return _interpret(call, response)
        raise AssertionError("unreachable: tenacity re-raises the last error")

    def submit(
        self,
        items: Iterable[Triple | Mapping[str, Any]],
        options: BatchOptions | Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        field_map: str | Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> BatchView:
        """Submit triples for grading; returns the queued batch. `field_map` names your fields in juiz's terms: a
        preset (`ragas`, `common`) or {their_name: juiz_name}; `name` is the batch's name (at most 200 characters,
        no control characters; shown on the web page)."""
        return self._run(self._requests.submit(items, options, idempotency_key, field_map, name))

    def batch(self, batch_id: str) -> BatchView:
        return self._run(self._requests.batch(batch_id))

    def wait(
        self,
        batch_id: str,
        *,
        poll_s: float = 1.0,
        timeout_s: float | None = None,
        on_progress: Callable[[BatchView], None] | None = None,
    ) -> BatchView:
        """Poll until the batch is done, failed or cancelled; `on_progress` sees every status read."""
        waiter = _Waiter(batch_id, timeout_s, on_progress)
        while not waiter.over(view := self.batch(batch_id)):
            time.sleep(poll_s)
        return view

    def results(self, batch_id: str, *, page_size: int = 500) -> Iterator[Judgement]:
        """Every result stored so far, in completion order (page by page)."""
        pager = _Pager(self._requests, batch_id, page_size)
        while (call := pager.next_call()) is not None:
            yield from pager.feed(self._run(call))

    def stream_results(self, batch_id: str, *, follow: bool = False) -> Iterator[Judgement]:
        """Results as NDJSON; with follow, the stream stays open until the batch is over."""
        call = self._requests.stream(batch_id, follow)
        kwargs = self._requests.send_kwargs(call)
        with self._http.stream(call.method, call.url, timeout=None, **kwargs) as response:
            if response.status_code >= 400:
                response.read()
            _interpret(call, response)
            for line in response.iter_lines():
                if (judgement := _judgement_line(line)) is not None:
                    yield judgement

    def agreement(self, batch_id: str, *, resamples: int = 1000) -> AgreementReport:
        return self._run(self._requests.agreement(batch_id, resamples))

    def agreement_by_metric(self, batch_id: str, *, resamples: int = 1000) -> AgreementByMetric:
        """Each metric and the verdict against the manual labels, side by side."""
        return self._run(self._requests.agreement_by_metric(batch_id, resamples))

    def calibration(self, batch_id: str, *, folds: int = 5) -> CalibrationSpec:
        """A calibration fitted on the batch's labels, to pass as options.calibration (ApiError 409 if it can't)."""
        return self._run(self._requests.calibration(batch_id, folds))

    def report(self, batch_id: str) -> str:
        return self._run(self._requests.report(batch_id))

    def rename(self, batch_id: str, name: str) -> BatchView:
        """Name the batch ("" removes the name)."""
        return self._run(self._requests.rename(batch_id, name))

    def compare(self, a: str, b: str, *, resamples: int = 1000) -> CompareReport:
        """Two batches on the items they share by id: agreement of each with the labels, score deltas, changes."""
        return self._run(self._requests.compare(a, b, resamples))

    def cancel(self, batch_id: str) -> BatchView:
        return self._run(self._requests.cancel(batch_id))

    def grade(
        self, item: Triple | Mapping[str, Any], options: BatchOptions | Mapping[str, Any] | None = None
    ) -> Judgement | BatchView:
        """Grade one triple now: the judgement, or (past the server's timeout) the batch to fetch it from later."""
        return self._run(self._requests.grade(item, options))

    def ready(self) -> ReadyView:
        """The readiness report, also when the service is not ready (503). Served to loopback clients, or with the
        API's JUIZ_METRICS_KEY as this client's key."""
        return self._run(self._requests.ready())


class AsyncJuizClient:
    """The asyncio client: the same methods as `JuizClient`, awaited; `results`/`stream_results` are async iterators."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        api_key: str | None = None,
        *,
        timeout_s: float = 120.0,
        retries: int = 2,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        """`http` lets a caller bring its own client (a test client, a proxy set-up); it is not closed here."""
        self._requests = _Requests(api_key)
        self._own = http is None
        self._http = http or httpx.AsyncClient(base_url=base_url, timeout=timeout_s)
        self._retries = retries

    async def __aenter__(self) -> AsyncJuizClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own:
            await self._http.aclose()

    async def _run(self, call: Call[T]) -> T:
        async for attempt in AsyncRetrying(**_retrying(call, self._retries)):
            with attempt:
                response = await self._http.request(call.method, call.url, **self._requests.send_kwargs(call))
                return _interpret(call, response)
        raise AssertionError("unreachable: tenacity re-raises the last error")

    async def submit(
        self,
        items: Iterable[Triple | Mapping[str, Any]],
        options: BatchOptions | Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        field_map: str | Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> BatchView:
        """Submit triples for grading; returns the queued batch. `field_map` names your fields in juiz's terms: a
        preset (`ragas`, `common`) or {their_name: juiz_name}; `name` is the batch's name (at most 200 characters,
        no control characters; shown on the web page)."""
        return await self._run(self._requests.submit(items, options, idempotency_key, field_map, name))

    async def batch(self, batch_id: str) -> BatchView:
        return await self._run(self._requests.batch(batch_id))

    async def wait(
        self,
        batch_id: str,
        *,
        poll_s: float = 1.0,
        timeout_s: float | None = None,
        on_progress: Callable[[BatchView], None] | None = None,
    ) -> BatchView:
        """Poll until the batch is done, failed or cancelled; `on_progress` sees every status read."""
        waiter = _Waiter(batch_id, timeout_s, on_progress)
        while not waiter.over(view := await self.batch(batch_id)):
            await asyncio.sleep(poll_s)
        return view

    async def results(self, batch_id: str, *, page_size: int = 500) -> AsyncIterator[Judgement]:
        """Every result stored so far, in completion order (page by page)."""
        pager = _Pager(self._requests, batch_id, page_size)
        while (call := pager.next_call()) is not None:
            for judgement in pager.feed(await self._run(call)):
                yield judgement

    async def stream_results(self, batch_id: str, *, follow: bool = False) -> AsyncIterator[Judgement]:
        """Results as NDJSON; with follow, the stream stays open until the batch is over."""
        call = self._requests.stream(batch_id, follow)
        kwargs = self._requests.send_kwargs(call)
        async with self._http.stream(call.method, call.url, timeout=None, **kwargs) as response:
            if response.status_code >= 400:
                await response.aread()
            _interpret(call, response)
            async for line in response.aiter_lines():
                if (judgement := _judgement_line(line)) is not None:
                    yield judgement

    async def agreement(self, batch_id: str, *, resamples: int = 1000) -> AgreementReport:
        return await self._run(self._requests.agreement(batch_id, resamples))

    async def agreement_by_metric(self, batch_id: str, *, resamples: int = 1000) -> AgreementByMetric:
        return await self._run(self._requests.agreement_by_metric(batch_id, resamples))

    async def calibration(self, batch_id: str, *, folds: int = 5) -> CalibrationSpec:
        return await self._run(self._requests.calibration(batch_id, folds))

    async def report(self, batch_id: str) -> str:
        return await self._run(self._requests.report(batch_id))

    async def rename(self, batch_id: str, name: str) -> BatchView:
        return await self._run(self._requests.rename(batch_id, name))

    async def compare(self, a: str, b: str, *, resamples: int = 1000) -> CompareReport:
        return await self._run(self._requests.compare(a, b, resamples))

    async def cancel(self, batch_id: str) -> BatchView:
        return await self._run(self._requests.cancel(batch_id))

    async def grade(
        self, item: Triple | Mapping[str, Any], options: BatchOptions | Mapping[str, Any] | None = None
    ) -> Judgement | BatchView:
        """Grade one triple now: the judgement, or (past the server's timeout) the batch to fetch it from later."""
        return await self._run(self._requests.grade(item, options))

    async def ready(self) -> ReadyView:
        """The readiness report, also when the service is not ready (503). Served to loopback clients, or with the
        API's JUIZ_METRICS_KEY as this client's key."""
        return await self._run(self._requests.ready())
