"""Web page sessions: the tenant's API key is exchanged once for an opaque session id in an HttpOnly cookie.

The key itself is never stored, put in a URL or logged: sign-in posts it in a form body, it is checked like an API
key (`service.auth.tenant_for`) and a random id is handed back. Redis holds only sha256(id) → tenant and the
session's CSRF token, expiring after SESSION_TTL_S; sign-out deletes it.

CSRF: the cookie is SameSite=Strict (a cross-site request doesn't carry it) AND every state-changing form carries
the session's token in a hidden field, compared in constant time; a request whose Origin names another host is
refused too. With an open API (no keys configured) a session without a key is created on the first visit, so the
same token check covers every POST. A form handler takes `posted: Posted` (the router's dependency, `posted_form`):
the session, the form, its token checked.

Why not Litestar's `ServerSideSessionConfig` and `CSRFConfig` (Litestar 2.25): its session cookie's Secure flag is
fixed by configuration (here it follows the request's scheme: Secure behind https, and http in tests and local
demos still works), and its store keys sessions by the raw id (here Redis holds sha256(id) only, so reading Redis
gives no session away). Its CSRF is a double-submit cookie signed with a shared secret, not a token bound to the
session; it checks no Origin (a cross-origin post with a valid token must still be 403); and it would need a new
secret setting shared by every API replica. The anonymous session of an open API and a session ending with its key
would stay hand-written either way.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio
from litestar import Request, Response
from litestar.datastructures import Cookie, FormMultiDict
from litestar.di import NamedDependency

from juiz.errors import JuizError
from juiz.store import PREFIX, Store, text
from service.auth import OPEN_TENANT
from service.ratelimit import WINDOW_S

COOKIE = "juiz_session"
SESSION_TTL_S = 8 * 3600
UI_PATH = "/ui"


class SignInRequired(JuizError):
    """No valid session: the page answers with a redirect to the sign-in form."""


class CsrfRejected(JuizError):
    """A state-changing request without the session's token, or from another origin (the page answers 403)."""


@dataclass(frozen=True)
class Session:
    id: str
    tenant: str
    csrf: str


def _key(session_id: str) -> str:
    return f"{PREFIX}:ui:session:{hashlib.sha256(session_id.encode()).hexdigest()}"


def open_api(request: Request[Any, Any, Any]) -> bool:
    return not request.app.state.tenants_by_key


def create(store: Store, tenant: str) -> Session:
    session = Session(secrets.token_urlsafe(32), tenant, secrets.token_urlsafe(32))
    store.redis.hset(_key(session.id), mapping={"tenant": tenant, "csrf": session.csrf})
    store.redis.expire(_key(session.id), SESSION_TTL_S)
    return session


def load(store: Store, request: Request[Any, Any, Any]) -> Session | None:
    session_id = request.cookies.get(COOKIE)
    if not session_id:
        return None
    raw = store.redis.hgetall(_key(session_id))
    if not raw:
        return None
    data = {text(k): text(v) for k, v in raw.items()}
    tenant = data["tenant"]
    tenants = request.app.state.tenants_by_key
    # A session outlives neither its key (keys removed from JUIZ_API_KEYS) nor a switch between open and keyed.
    if (tenants and tenant not in tenants.values()) or (not tenants and tenant != OPEN_TENANT):
        return None
    return Session(session_id, tenant, data["csrf"])


def delete(store: Store, session: Session) -> None:
    store.redis.delete(_key(session.id), f"{_key(session.id)}:flash")


def cookie_for(session: Session, request: Request[Any, Any, Any]) -> Cookie:
    return Cookie(
        key=COOKIE,
        value=session.id,
        path=UI_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        max_age=SESSION_TTL_S,
    )


def expired_cookie() -> Cookie:
    return Cookie(key=COOKIE, value="", path=UI_PATH, httponly=True, samesite="strict", max_age=0)


def require(store: Store, request: Request[Any, Any, Any]) -> Session:
    """The caller's session; with an open API one is made on the spot (its cookie is set by `with_cookie`)."""
    session = load(store, request)
    if session is not None:
        return session
    if open_api(request):
        session = create(store, OPEN_TENANT)
        request.state.new_session = session
        return session
    raise SignInRequired


def with_cookie(request: Request[Any, Any, Any], response: Response[Any]) -> Response[Any]:
    """Attach the cookie of a session `require` created during this request."""
    session = getattr(request.state, "new_session", None)
    if session is not None:
        response.set_cookie(cookie_for(session, request))
    return response


def signin_retry_after(store: Store, request: Request[Any, Any, Any]) -> int | None:
    """Sign-in attempts count against the client address's API rate limit (the same counter /v1 uses for callers
    without a known key), so guessing keys through the form is as limited as through the API. Seconds to wait when
    over the limit, else None."""
    limit: int = store.settings.rate_limit_per_minute
    if limit <= 0:
        return None
    now = time.time()
    window = int(now // WINDOW_S)
    key = f"{PREFIX}:ratelimit:client:{request.client.host if request.client else 'unknown'}:{window}"
    with store.redis.pipeline(transaction=True) as pipe:
        pipe.incr(key)
        pipe.expire(key, WINDOW_S * 2)
        count, _ = pipe.execute()
    if int(count) <= limit:
        return None
    return max(1, int((window + 1) * WINDOW_S - now) + 1)


FLASH_TTL_S = 600


def put_flash(store: Store, session: Session, data: dict[str, Any]) -> None:
    """What a refused form posted and why, for the page the POST redirects to (so a reload doesn't post again)."""
    store.redis.set(f"{_key(session.id)}:flash", json.dumps(data), ex=FLASH_TTL_S)


def pop_flash(store: Store, session: Session) -> dict[str, Any] | None:
    """The flash once: shown by the next page, gone after."""
    with store.redis.pipeline(transaction=True) as pipe:
        pipe.get(f"{_key(session.id)}:flash")
        pipe.delete(f"{_key(session.id)}:flash")
        raw, _ = pipe.execute()
    return None if raw is None else dict(json.loads(raw))


def safe_next(target: str) -> bool:
    """Only back to a page of ours: never an open redirect (no scheme, no other host, no backslash tricks)."""
    return (
        target.startswith(f"{UI_PATH}/")
        and "//" not in target
        and "\\" not in target
        and not target.startswith(f"{UI_PATH}/signin")
    )


def check_origin(request: Request[Any, Any, Any]) -> None:
    """Refuse a POST whose Origin names another host. ("null", sent by privacy settings, is left to the token.)"""
    origin = request.headers.get("origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host", ""):
        raise CsrfRejected("cross-origin request")


def check_csrf(session: Session, request: Request[Any, Any, Any], token: str | None) -> None:
    check_origin(request)
    if not token or not hmac.compare_digest(token.encode(), session.csrf.encode()):
        raise CsrfRejected("missing or wrong CSRF token")


@dataclass(frozen=True)
class Posted:
    """A state-changing form, posted within a session whose CSRF token it carries."""

    session: Session
    form: FormMultiDict


async def posted_form(request: Request[Any, Any, Any], store: NamedDependency[Store]) -> Posted:
    """The /ui router's `posted` dependency: the session (SignInRequired without one), the form, the token checked
    (CsrfRejected)."""
    current = await anyio.to_thread.run_sync(require, store, request)
    form = await request.form()
    check_csrf(current, request, form.get("csrf"))
    return Posted(current, form)
