"""A small client for juiz's HTTP API, for scripts and RAG pipelines.

    from juiz.client import JuizClient

    with JuizClient("http://localhost:8000", api_key="…") as juiz:
        batch = juiz.submit(triples)                     # Triple objects or plain dicts
        juiz.wait(batch.id, on_progress=print)           # until done / failed / cancelled
        for judgement in juiz.results(batch.id):         # completion order
            ...
        print(juiz.report(batch.id))

Submissions carry an Idempotency-Key, so `submit` retries a dropped connection without creating a second batch.
Errors: `ApiError` (a `JuizError`) with the HTTP status and the server's body, which names the field at fault.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import httpx

from juiz.errors import JuizError
from schemas import AgreementReport, BatchOptions, BatchStatus, BatchView, Judgement, ReadyView, Triple

NDJSON = "application/x-ndjson"
TERMINAL = (BatchStatus.DONE, BatchStatus.FAILED, BatchStatus.CANCELLED)


class ApiError(JuizError):
    """The API answered with an error status."""

    def __init__(self, status_code: int, body: Any) -> None:
        self.status_code = status_code
        self.body = body
        detail = body.get("detail") if isinstance(body, dict) else body
        field = body.get("field") if isinstance(body, dict) else None
        super().__init__(f"HTTP {status_code}: {detail}" + (f" (field {field})" if field else ""))


class JuizClient:
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
        self._auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
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

    # --- batches ----------------------------------------------------------------------------------------------

    def submit(
        self,
        items: Iterable[Triple | Mapping[str, Any]],
        options: BatchOptions | Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> BatchView:
        """Submit triples for grading; returns the queued batch."""
        body = {
            "items": [
                t.model_dump(mode="json", exclude_none=True) if isinstance(t, Triple) else dict(t) for t in items
            ],
            "options": _options(options),
        }
        headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}
        return BatchView.model_validate(self._request("POST", "/v1/batches", json=body, headers=headers, retry=True))

    def batch(self, batch_id: str) -> BatchView:
        return BatchView.model_validate(self._request("GET", f"/v1/batches/{batch_id}"))

    def wait(
        self,
        batch_id: str,
        *,
        poll_s: float = 1.0,
        timeout_s: float | None = None,
        on_progress: Callable[[BatchView], None] | None = None,
    ) -> BatchView:
        """Poll until the batch is done, failed or cancelled; `on_progress` sees every status read."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            view = self.batch(batch_id)
            if on_progress is not None:
                on_progress(view)
            if view.status in TERMINAL:
                return view
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"batch {batch_id} still {view.status.value} after {timeout_s}s")
            time.sleep(poll_s)

    def results(self, batch_id: str, *, page_size: int = 500) -> Iterator[Judgement]:
        """Every result stored so far, in completion order (page by page)."""
        cursor: str | None = ""
        while cursor is not None:
            page = self._request(
                "GET", f"/v1/batches/{batch_id}/results", params={"cursor": cursor, "limit": page_size}
            )
            for item in page["items"]:
                yield Judgement.model_validate(item)
            if not page["items"]:
                return  # nothing more now; a running batch would give the same cursor again
            cursor = page["next_cursor"]

    def stream_results(self, batch_id: str, *, follow: bool = False) -> Iterator[Judgement]:
        """Results as NDJSON; with follow, the stream stays open until the batch is over."""
        params = {"follow": "true" if follow else "false"}
        with self._http.stream(
            "GET",
            f"/v1/batches/{batch_id}/results",
            params=params,
            headers={**self._auth, "Accept": NDJSON},
            timeout=None,
        ) as response:
            if response.status_code >= 400:
                response.read()
                raise ApiError(response.status_code, _body(response))
            for line in response.iter_lines():
                if line.strip():
                    yield Judgement.model_validate_json(line)

    def agreement(self, batch_id: str, *, resamples: int = 1000) -> AgreementReport:
        data = self._request("GET", f"/v1/batches/{batch_id}/agreement", params={"resamples": resamples})
        return AgreementReport.model_validate(data)

    def report(self, batch_id: str) -> str:
        return str(self._request("GET", f"/v1/batches/{batch_id}/report", raw=True))

    def cancel(self, batch_id: str) -> BatchView:
        return BatchView.model_validate(self._request("DELETE", f"/v1/batches/{batch_id}"))

    # --- one triple, operations -------------------------------------------------------------------------------

    def grade(
        self, item: Triple | Mapping[str, Any], options: BatchOptions | Mapping[str, Any] | None = None
    ) -> Judgement | BatchView:
        """Grade one triple now: the judgement, or (past the server's timeout) the batch to fetch it from later."""
        body = {
            "item": item.model_dump(mode="json", exclude_none=True) if isinstance(item, Triple) else dict(item),
            "options": _options(options),
        }
        response = self._send("POST", "/v1/grade", json=body)
        if response.status_code == 202:
            return BatchView.model_validate(response.json())
        return Judgement.model_validate(response.json())

    def ready(self) -> ReadyView:
        """The readiness report, also when the service is not ready (503)."""
        response = self._http.get("/ready", headers=self._auth)
        if response.status_code not in (200, 503):
            raise ApiError(response.status_code, _body(response))
        return ReadyView.model_validate(response.json())

    # --- plumbing ---------------------------------------------------------------------------------------------

    def _request(self, method: str, url: str, *, raw: bool = False, retry: bool = False, **kwargs: Any) -> Any:
        response = self._send(method, url, retry=retry, **kwargs)
        return response.text if raw else response.json()

    def _send(self, method: str, url: str, *, retry: bool = False, **kwargs: Any) -> httpx.Response:
        kwargs["headers"] = {**self._auth, **kwargs.get("headers", {})}
        attempts = 1 + (self._retries if retry or method in ("GET", "DELETE") else 0)
        for attempt in range(attempts):
            try:
                response = self._http.request(method, url, **kwargs)
            except httpx.TransportError:
                if attempt == attempts - 1:
                    raise
                time.sleep(0.5 * 2**attempt)
                continue
            if response.status_code >= 400:
                raise ApiError(response.status_code, _body(response))
            return response
        raise AssertionError("unreachable")


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
