"""/ui's entry: the sign-in form, and signing in and out (an API key exchanged for a session cookie, never kept)."""

from __future__ import annotations

from typing import Any

import anyio
from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.response import Redirect

from juiz.store import Store
from service.auth import tenant_for
from service.ui import session
from service.ui.render import html
from service.ui.session import Posted


class SignInController(Controller):
    """The sign-in form and sign-out: an API key exchanged for a session cookie."""

    path = "/"
    include_in_schema = False

    @get("/", sync_to_thread=False)
    def home(self) -> Redirect:
        return Redirect("/ui/batches")

    @get("/signin", sync_to_thread=False)
    def signin_form(self, request: Request[Any, Any, Any]) -> Response[Any]:
        back = request.query_params.get("next", "")
        if session.open_api(request):
            return Redirect(back if session.safe_next(back) else "/ui/batches")
        return html("signin.html", error=None, next=back if session.safe_next(back) else "")

    @post("/signin", status_code=303, exclude_from_csrf=True)  # no session yet: the Origin check and the rate limit
    async def signin(self, request: Request[Any, Any, Any], store: NamedDependency[Store]) -> Response[Any]:
        """Exchange the API key for a session cookie. The key is read from the form body and never kept."""
        retry_after = await anyio.to_thread.run_sync(session.signin_retry_after, store, request)
        if retry_after is not None:
            response = html(
                "signin.html", error="Too many attempts: wait a minute and try again.", status_code=429, next=""
            )
            response.headers["Retry-After"] = str(retry_after)
            return response
        form = await request.form()
        key = str(form.get("api_key") or "").strip()
        back = str(form.get("next") or "")
        back = back if session.safe_next(back) else ""
        tenant = tenant_for(key, request.app.state.tenants_by_key) if key else None
        if tenant is None:
            return html("signin.html", error="That API key is not known.", status_code=401, next=back)
        session.sign_in(request, tenant, request.app.state.annotators_by_key.get(key, tenant))
        return Redirect(back or "/ui/batches", status_code=303)

    @post("/signout", status_code=303, sync_to_thread=False)
    def signout(self, request: Request[Any, Any, Any], posted: NamedDependency[Posted]) -> Response[Any]:
        session.sign_out(request)
        return Redirect("/ui/signin", status_code=303)
