"""What the OpenAPI document says beyond the handlers' signatures: every error status a route can answer (with the
`ErrorBody` it sends), the bearer security scheme, and the documentation pages, served offline.

The pages' JavaScript and CSS come from the `swagger-ui-bundle-v2` package (Swagger UI's own distribution, installed
by pip) and are served by juiz under /schema/assets: a browser loading juiz's docs never reaches a CDN, so they work
on an air-gapped network and no third party learns who reads them. Scalar, Redoc and the other viewers Litestar
offers are not enabled: they are published on npm only, and juiz installs from PyPI.
"""

from __future__ import annotations

from pathlib import Path

import swagger_ui_bundle
from litestar import Litestar
from litestar.openapi import OpenAPIConfig, ResponseSpec
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.openapi.spec import Components, OpenAPIType, Schema, SecurityScheme
from litestar.router import Router
from litestar.static_files import create_static_files_router
from pydantic import BaseModel

import schemas
from juiz import __version__
from schemas import ErrorBody

DOCS_PATH = "/schema"
ASSETS_PATH = f"{DOCS_PATH}/assets"
SECURITY_SCHEME = "BearerKey"
# On the /v1 controllers; /health, /ready, /metrics and the docs need no key.
SECURITY: list[dict[str, list[str]]] = [{SECURITY_SCHEME: []}]
BATCH_ID_PATTERN = r"^[0-9a-f]{32}$"  # uuid4().hex, as juiz.store makes them
CURSOR_PATTERN = r"^[0-9]{0,15}$"

_DESCRIPTIONS = {
    401: "Missing or unknown API key (`Authorization: Bearer <key>`; the metrics key on /metrics and /ready).",
    403: "/metrics and /ready: not a loopback client and no JUIZ_METRICS_KEY configured.",
    404: "No such batch for this API key (another tenant's batch is not revealed).",
    409: "Conflicts with the current state: an Idempotency-Key used with a different request body, or a batch "
    "whose manual labels cannot support a calibration (too few, one class).",
    413: "Over max_items, max_batch_conversations or max_body_bytes; `limit` and `maximum` name the limit.",
    415: "The body's Content-Type is not one this route reads.",
    422: "Invalid input: `field` names it (an unknown query parameter or option too), and `index` (JSON) or `line` "
    "(JSONL) the item; on agreement and calibration, labels the batch's label mapping does not know.",
    429: "Over this tenant's rate limit; retry after `Retry-After` seconds.",
    503: "The queue store (Redis) is unreachable; try again after `Retry-After` seconds.",
}


def responses(*statuses: int) -> dict[int, ResponseSpec]:
    """The documented error answers of a route, each with an ErrorBody."""
    return {
        status: ResponseSpec(data_container=ErrorBody, description=_DESCRIPTIONS[status], generate_examples=False)
        for status in statuses
    }


def forbid_extra_fields(app: Litestar) -> None:
    """On start-up: mark the component schemas of models that refuse unknown fields (`extra="forbid"`) with
    `additionalProperties: false`, which Litestar's generator does not write, so generated clients and schemathesis
    know that a misspelt field is a 422."""
    components = app.openapi_schema.components
    for name, schema in (components.schemas or {}).items():
        model = getattr(schemas, name, None)
        forbids = (
            isinstance(model, type) and issubclass(model, BaseModel) and model.model_config.get("extra") == "forbid"
        )
        if forbids and isinstance(schema, Schema):
            schema.additional_properties = False


def document_limits(app: Litestar) -> None:
    """On start-up: this deployment's character limits (JUIZ_MAX_*_CHARS) as maxLength of the Triple's text fields,
    so the document says what intake will refuse."""
    settings = app.state.settings
    triple = (app.openapi_schema.components.schemas or {}).get("Triple")
    if not isinstance(triple, Schema) or not triple.properties:
        return
    for field, limit in (
        ("question", settings.max_question_chars),
        ("answer", settings.max_answer_chars),
        ("context", settings.max_context_chars),
    ):
        schema = triple.properties.get(field)
        # context is text or segments (one_of): the limit is on the text, and on all segments' text together.
        targets = (schema.one_of or [schema]) if isinstance(schema, Schema) else []
        for target in targets:
            if isinstance(target, Schema) and target.type == OpenAPIType.STRING:
                target.max_length = limit
        if isinstance(schema, Schema):
            note = f"At most {limit} characters (JUIZ_MAX_{field.upper()}_CHARS)."
            schema.description = f"{schema.description} {note}" if schema.description else note


def assets_directory() -> Path:
    return Path(str(swagger_ui_bundle.swagger_ui_path))


def assets_router() -> Router:
    """Swagger UI's files, from the installed package."""
    return create_static_files_router(
        path=ASSETS_PATH, directories=[assets_directory()], include_in_schema=False, name="docs-assets"
    )


def openapi_config() -> OpenAPIConfig:
    return OpenAPIConfig(
        title="juiz",
        version=__version__,
        description="Grade RAG answers (answer relevance, groundedness, context relevance and a verdict) with a local "
        "LLM judge, and measure its agreement with your labels.",
        use_handler_docstrings=True,
        path=DOCS_PATH,
        components=Components(
            security_schemes={
                SECURITY_SCHEME: SecurityScheme(
                    type="http",
                    scheme="bearer",
                    description="An API key from JUIZ_API_KEYS ('tenant:key'); each key is a tenant.",
                )
            }
        ),
        render_plugins=[
            SwaggerRenderPlugin(
                js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
                css_url=f"{ASSETS_PATH}/swagger-ui.css",
                standalone_preset_js_url=f"{ASSETS_PATH}/swagger-ui-standalone-preset.js",
                favicon=f"<link rel='icon' type='image/png' href='{ASSETS_PATH}/favicon-32x32.png'>",
                path=["/swagger", "/"],
            )
        ],
    )
