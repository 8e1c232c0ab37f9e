"""`juiz serve`: the API under uvicorn, configured from `JUIZ_*` environment variables."""

from __future__ import annotations

import ipaddress
import logging

import uvicorn

from juiz.runtime.errors import InputError
from juiz.runtime.settings import Settings
from service.app import create_app


def check_not_open(settings: Settings, host: str) -> None:
    """Secure by default: no API keys is allowed on a loopback address only (a laptop, a test), unless the operator
    says so with JUIZ_ALLOW_OPEN_API — an API reachable from the network never starts open by mistake."""
    if settings.tenants_by_key or settings.allow_open_api:
        return
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise InputError(
            f"no API keys while listening on {host}: set JUIZ_API_KEYS=tenant:key (or JUIZ_ALLOW_OPEN_API=true "
            "to serve an open API on purpose)",
            source="JUIZ_API_KEYS",
        )


def serve(host: str | None = None, port: int | None = None) -> int:
    """Run the API until stopped; flags override JUIZ_HOST / JUIZ_PORT."""
    settings = Settings.from_env()
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(settings.log_level)
    host = host or settings.host
    check_not_open(settings, host)
    uvicorn.run(
        create_app(settings),
        host=host,
        port=port or settings.port,
        log_level=settings.log_level.lower(),
        # X-Forwarded-For is believed only from the configured proxies (uvicorn's default trusts 127.0.0.1: anyone on
        # the host could then claim any address, past the per-client limits and the loopback check of /metrics).
        proxy_headers=bool(settings.trusted_proxies),
        forwarded_allow_ips=settings.trusted_proxies or None,
    )
    return 0
