"""Clients of juiz's HTTP API, for scripts, RAG pipelines and CI: `JuizClient` (sync), `AsyncJuizClient` (asyncio),
and `juiz.clients.testing.assert_quality` for a team's own pytest suite."""

from juiz.clients.http import ApiError, AsyncJuizClient, JuizClient

__all__ = ["ApiError", "AsyncJuizClient", "JuizClient"]
