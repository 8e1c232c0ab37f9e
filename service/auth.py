"""API keys: `Authorization: Bearer <key>`; each configured key is a tenant that sees only its own batches.

Keys are compared in constant time against every configured key, and never logged. With no keys configured the API
is open and every caller is the tenant `public` (the app warns at start-up).
"""

from __future__ import annotations

import hmac
from typing import Any

from litestar import Request
from litestar.di import NamedDependency
from litestar.exceptions import NotAuthorizedException

OPEN_TENANT = "public"
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="juiz"'}


def tenant_for(token: str, tenants_by_key: dict[str, str]) -> str | None:
    """The tenant whose key equals `token`. Every key is compared, so timing does not tell which one matched."""
    found = None
    presented = token.encode()
    for key, tenant in tenants_by_key.items():
        if hmac.compare_digest(presented, key.encode()):
            found = tenant
    return found


def provide_tenant(request: Request[Any, Any, Any]) -> str:
    """Litestar dependency: the caller's tenant, or 401."""
    tenants_by_key: dict[str, str] = request.app.state.tenants_by_key
    if not tenants_by_key:
        return OPEN_TENANT
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise NotAuthorizedException(
            detail="missing API key: send 'Authorization: Bearer <key>'",
            headers=CHALLENGE,
            extra={"field": "Authorization"},
        )
    tenant = tenant_for(token.strip(), tenants_by_key)
    if tenant is None:
        raise NotAuthorizedException(detail="unknown API key", headers=CHALLENGE, extra={"field": "Authorization"})
    return tenant


def provide_annotator(request: Request[Any, Any, Any], tenant: NamedDependency[str]) -> str:
    """Litestar dependency: whose labels the caller sets (the key's name; the tenant when the API is open)."""
    _, _, token = request.headers.get("authorization", "").partition(" ")
    annotators: dict[str, str] = getattr(request.app.state, "annotators_by_key", {})
    for key, name in annotators.items():
        if hmac.compare_digest(token.strip().encode(), key.encode()):
            return name
    return tenant
