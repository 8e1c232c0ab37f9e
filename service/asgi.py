"""The ASGI entry point for servers: `uvicorn service.asgi:app`. Settings are read from the environment here."""

from service.app import create_app

app = create_app()
