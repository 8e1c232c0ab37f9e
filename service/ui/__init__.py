"""The web page under /ui, served by the API's own Litestar app: `ui_router()` is all create_app registers."""

from service.ui.router import ui_router

__all__ = ["ui_router"]
