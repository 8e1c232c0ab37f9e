"""Web page sessions and CSRF: Litestar's own (`ServerSideSessionConfig` over a `RedisStore`, `CSRFConfig`), with
the few rules of ours Litestar has no setting for.

Sign-in posts the tenant's API key in a form body; it is checked like an API key (`service.auth.tenant_for`) and is
never stored, put in a URL or logged. The session is Litestar's server-side session: an opaque random id in an
HttpOnly, SameSite=Strict cookie on /ui; its data (`tenant`, `at`: when it was signed into, and a flash) sits in
Redis under sha256(id), so reading Redis gives no session away. A session lasts SESSION_TTL_S from sign-in; sign-out
clears it (`request.clear_session()`, which deletes it from Redis); removing a key from JUIZ_API_KEYS ends its
sessions (`require` checks the tenant on every request). With an open API (no keys) an anonymous session is made on
the first visit: label queues, fitted calibrations and the flash are kept per session.

CSRF: Litestar's `CSRFConfig` (a random token signed with JUIZ_CSRF_SECRET, in a cookie and repeated in every
state-changing form as `_csrf_token`; Litestar compares them in constant time), on top of SameSite=Strict, plus a
check of ours refusing a POST whose Origin names another host (`check_origin`). Without JUIZ_CSRF_SECRET the secret
is created once in Redis (SET NX, `shared_csrf_secret`) and read by every API replica on its first /ui request.
Sign-in carries no token (nothing is signed in yet to protect): it has the Origin check and the rate limit.

Secure flag: set on both cookies by JUIZ_SECURE_COOKIES (Litestar's fixed `secure` / `cookie_secure`); the session
cookie is Secure as well whenever the request itself came over https, as before.

What stays ours, and why (Litestar 2.25):
- `_SessionBackend`, over Litestar's `ServerSideSessionBackend`: Litestar's writes the session and sets its cookie on
  every response, so every visitor would get a stored empty session and a cookie (a refused sign-in too), a page's
  poll in flight during sign-out would write the session back, and it adopts whatever id a cookie names (session
  fixation). Ours writes a session only when it changed and never an empty one, takes a cookie's id only if Redis
  holds that session, gives a new id at sign-in, and keys Redis by sha256(id).
- `_CSRFMiddleware`, over Litestar's `CSRFMiddleware`: the Origin check (Litestar's checks none), the shared secret
  read from Redis on first use (at startup Redis may be away; the API starts without it), and a refused upload's
  files closed (Litestar leaves them open when its middleware refuses the request).
- The Origin check, the tenant and sign-in-age check, the sign-in rate limit, `safe_next` (Litestar has none).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

from litestar import Request
from litestar.config.csrf import CSRFConfig
from litestar.connection import ASGIConnection
from litestar.datastructures import Cookie, FormMultiDict, MutableScopeHeaders
from litestar.middleware import DefineMiddleware
from litestar.middleware.csrf import CSRFMiddleware
from litestar.middleware.session.server_side import ServerSideSessionBackend, ServerSideSessionConfig
from litestar.stores.base import Store as LitestarStore
from litestar.stores.redis import RedisStore
from litestar.types import Empty, HTTPScope, Message, Receive, Scope, ScopeSession, Send
from litestar.utils.dataclass import extract_dataclass_items
from litestar.utils.empty import value_or_default
from litestar.utils.scope.state import ScopeState
from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import ResponseError

from juiz.runtime.errors import JuizError
from juiz.runtime.retry import write_refused
from juiz.runtime.settings import Settings
from juiz.store import PREFIX, Store
from service.auth import OPEN_TENANT
from service.metrics import RATE_LIMIT_FAILED_OPEN

COOKIE = "juiz_session"
CSRF_COOKIE = "juiz_csrf"
SESSION_TTL_S = 8 * 3600
UI_PATH = "/ui"
SESSION_STORE = "juiz-ui-sessions"  # the name the session store is registered under (`app.stores`)
SESSION_NAMESPACE = f"{PREFIX}:ui:session"
CSRF_SECRET_KEY = f"{PREFIX}:ui:csrf-secret"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
STATIC = [f"^{UI_PATH}/static/"]  # files: no session read, no CSRF cookie
# scope["state"] keys between this module and the backend
_LOADED = "juiz.session.loaded"  # (cookie's id, the stored bytes) when Redis held the cookie's session
_RENEW = "juiz.session.renew"  # sign-in: store the session under a new id


class SignInRequired(JuizError):
    """No valid session: the page answers with a redirect to the sign-in form."""


class CsrfRejected(JuizError):
    """A state-changing request from another origin (the page answers 403; a missing or wrong token is Litestar's
    PermissionDeniedException, answered the same)."""


@dataclass(frozen=True)
class Session:
    id: str
    tenant: str
    csrf: str  # this request's CSRF token, for the page's forms
    annotator: str = ""  # whose labels this user sets: the key's name, or the name given on an open API's page

    @property
    def author(self) -> str:
        return self.annotator or self.tenant


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class _SessionBackend(ServerSideSessionBackend):
    """Litestar's server-side sessions, writing only what changed, adopting only ids Redis knows (see the module
    docstring); Redis keys are sha256(id)."""

    async def get(self, session_id: str, store: LitestarStore) -> bytes | None:
        return await super().get(_digest(session_id), store)

    async def set(self, session_id: str, data: bytes, store: LitestarStore) -> None:
        await super().set(_digest(session_id), data, store)

    async def delete(self, session_id: str, store: LitestarStore) -> None:
        await super().delete(_digest(session_id), store)

    async def load_from_connection(self, connection: ASGIConnection[Any, Any, Any, Any]) -> dict[str, Any]:
        session_id = connection.cookies.get(self.config.key)
        stored = None
        if session_id and session_id != "null":
            stored = await self.get(session_id, self.config.get_store_from_app(connection.scope["app"]))
        connection.scope["state"][_LOADED] = None if stored is None else (session_id, stored)
        return {} if stored is None else self.deserialize_data(stored)

    def get_session_id(self, connection: ASGIConnection[Any, Any, Any, Any]) -> str:
        """The request's id (decided when the session was loaded): the cookie's if Redis held that session, else new."""
        if session_id := connection.get_session_id():
            return session_id
        loaded = connection.scope["state"].get(_LOADED)
        return str(loaded[0]) if loaded else self.generate_session_id()

    async def store_in_message(
        self, scope_session: ScopeSession, message: Message, connection: ASGIConnection[Any, Any, Any, Any]
    ) -> None:
        state = connection.scope["state"]
        loaded, renew = state.get(_LOADED), state.pop(_RENEW, False)
        store = self.config.get_store_from_app(connection.scope["app"])
        headers = MutableScopeHeaders.from_message(message)
        params = dict(extract_dataclass_items(self.config, exclude_none=True, include=Cookie.__dict__.keys()))
        params["secure"] = self.config.secure or connection.url.scheme == "https"
        if scope_session is Empty or not scope_session:  # signed out, or no session was ever made
            if loaded is not None:
                await self.delete(loaded[0], store)
            if connection.cookies.get(self.config.key):
                expired = Cookie(**{**params, "key": self.config.key, "value": "", "max_age": 0})
                headers.add("Set-Cookie", expired.to_header(header=""))
            return
        data = self.serialize_data(scope_session, connection.scope)
        if loaded is not None and not renew and data == loaded[1]:
            return  # unchanged: nothing written, the cookie stays as it is
        session_id = self.get_session_id(connection)
        if renew:
            if loaded is not None:
                await self.delete(loaded[0], store)
            session_id = self.generate_session_id()
        await self.set(session_id, data, store)
        cookie = Cookie(**{**params, "key": self.config.key, "value": session_id})
        headers.add("Set-Cookie", cookie.to_header(header=""))


@dataclass
class _SessionConfig(ServerSideSessionConfig):
    _backend_class = _SessionBackend


def session_middleware(settings: Settings) -> DefineMiddleware:
    """The /ui router's session middleware; its store is registered by the app's lifespan (`session_store`)."""
    return _SessionConfig(
        key=COOKIE,
        path=UI_PATH,
        max_age=SESSION_TTL_S,
        httponly=True,
        samesite="strict",
        secure=settings.secure_cookies,
        store=SESSION_STORE,
        exclude=STATIC,
    ).middleware


def session_store(redis: AsyncRedis) -> RedisStore:
    """Litestar's RedisStore on the API's asyncio client (its keys: SESSION_NAMESPACE:sha256(id))."""
    return RedisStore(redis, namespace=SESSION_NAMESPACE)


async def shared_csrf_secret(store: Store) -> str:
    """The CSRF secret every API replica shares when JUIZ_CSRF_SECRET is empty: created once (SET NX), then read.
    Redis refusing that write (full) is the app's 507, never a 500."""
    return await store.reads.shared_secret(CSRF_SECRET_KEY, secrets.token_hex(32))


class _CSRFMiddleware(CSRFMiddleware):
    """Litestar's CSRF middleware, plus: the Origin check first (before any body is read; sign-in too, which skips
    the token), the shared secret read from Redis on first use when none is configured, and the files of a refused
    upload closed (Litestar's route closes a form's files only once the handler has run)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and cast("HTTPScope", scope)["method"] not in SAFE_METHODS:
            check_origin(ASGIConnection[Any, Any, Any, Any](scope))
        if not self.config.secret:
            self.config.secret = await shared_csrf_secret(scope["app"].state.store)
        try:
            await super().__call__(scope, receive, send)
        except Exception:
            if (form := ScopeState.from_scope(scope).form) is not Empty:
                await FormMultiDict.from_form_data(form).close()
            raise


def csrf_middleware(settings: Settings) -> DefineMiddleware:
    config = CSRFConfig(
        secret=settings.csrf_secret.get_secret_value(),
        cookie_name=CSRF_COOKIE,
        cookie_path=UI_PATH,
        cookie_secure=settings.secure_cookies,
        cookie_httponly=True,  # the token reaches the page in its forms, never through script
        cookie_samesite="strict",
        exclude=STATIC,
    )
    return DefineMiddleware(_CSRFMiddleware, config=config)


def open_api(request: ASGIConnection[Any, Any, Any, Any]) -> bool:
    return not request.app.state.tenants_by_key


def require(request: Request[Any, Any, Any]) -> Session:
    """The caller's session; with an open API one is made on the spot (the middleware stores it and sets the cookie).
    A session whose key is gone (or signed into before the API was opened or closed) is cleared."""
    data = request.session
    tenant, at = data.get("tenant"), data.get("at")
    tenants = request.app.state.tenants_by_key
    valid = (tenant in tenants.values()) if tenants else tenant == OPEN_TENANT
    if isinstance(tenant, str) and valid and isinstance(at, float | int) and time.time() - at < SESSION_TTL_S:
        return Session(request.get_session_id() or "", tenant, _csrf_token(request), str(data.get("annotator") or ""))
    if open_api(request):
        request.set_session({"tenant": OPEN_TENANT, "at": time.time()})
        return Session(request.get_session_id() or "", OPEN_TENANT, _csrf_token(request))
    if data:
        request.clear_session()
    raise SignInRequired


def sign_in(request: Request[Any, Any, Any], tenant: str, annotator: str = "") -> None:
    """A new session for the tenant, under a new id (whatever id the browser had), labelling as `annotator`."""
    request.set_session({"tenant": tenant, "at": time.time(), "annotator": annotator})
    request.scope["state"][_RENEW] = True


MAX_NAME_CHARS = 64


def name_annotator(request: Request[Any, Any, Any], name: str) -> None:
    """On an open API the page's user names themself (there is no key to name them): their labels carry it."""
    name = " ".join(name.split())[:MAX_NAME_CHARS]
    if name and open_api(request):
        request.session["annotator"] = name


def sign_out(request: Request[Any, Any, Any]) -> None:
    request.clear_session()


def _csrf_token(request: Request[Any, Any, Any]) -> str:
    return str(value_or_default(ScopeState.from_scope(request.scope).csrf_token, ""))


def signin_retry_after(store: Store, request: Request[Any, Any, Any]) -> int | None:
    """Sign-in attempts count against the client address's API rate limit (the same counter /v1 uses for callers
    without a known key), so guessing keys through the form is as limited as through the API. Seconds to wait when
    over the limit, else None; None too when Redis refuses the count's write (the limit fails open, counted)."""
    limit: int = store.settings.rate_limit_per_minute
    if limit <= 0:
        return None
    try:
        return store.rates.hit(f"client:{request.client.host if request.client else 'unknown'}", limit)
    except ResponseError as exc:
        if not write_refused(exc):
            raise
        RATE_LIMIT_FAILED_OPEN.inc()
        return None


def put_flash(request: Request[Any, Any, Any], data: dict[str, Any]) -> None:
    """What a refused form posted and why, for the page the POST redirects to (so a reload doesn't post again)."""
    request.session["flash"] = data


def pop_flash(request: Request[Any, Any, Any]) -> dict[str, Any] | None:
    """The flash once: shown by the next page, gone after."""
    flash = request.session.pop("flash", None)
    return dict(flash) if flash else None


def safe_next(target: str) -> bool:
    """Only back to a page of ours: never an open redirect (no scheme, no other host, no backslash tricks)."""
    return (
        target.startswith(f"{UI_PATH}/")
        and "//" not in target
        and "\\" not in target
        and not target.startswith(f"{UI_PATH}/signin")
    )


def check_origin(connection: ASGIConnection[Any, Any, Any, Any]) -> None:
    """Refuse a state-changing request whose Origin names another host. ("null", sent by privacy settings, is left to
    the CSRF token.)"""
    origin = connection.headers.get("origin")
    if origin and origin != "null" and urlsplit(origin).netloc != connection.headers.get("host", ""):
        raise CsrfRejected("cross-origin request")


@dataclass(frozen=True)
class Posted:
    """A state-changing form, posted within a session (its CSRF token already checked by Litestar's middleware)."""

    session: Session
    form: FormMultiDict


async def posted_form(request: Request[Any, Any, Any]) -> Posted:
    """The /ui router's `posted` dependency: the session (SignInRequired without one) and the form."""
    return Posted(require(request), await request.form())
