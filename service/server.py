"""`juiz serve`: the API under uvicorn, configured from `JUIZ_*` environment variables."""

from __future__ import annotations

import logging

import uvicorn

from juiz.settings import Settings
from service.app import create_app


def serve(host: str | None = None, port: int | None = None) -> int:
    """Run the API until stopped; flags override JUIZ_HOST / JUIZ_PORT."""
    settings = Settings.from_env()
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(settings.log_level)
    uvicorn.run(
        create_app(settings),
        host=host or settings.host,
        port=port or settings.port,
        log_level=settings.log_level.lower(),
        proxy_headers=True,
    )
    return 0
