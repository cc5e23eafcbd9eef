"""The served OpenAPI spec: FastAPI's, plus the bodies of routes that read their body themselves
(`body_doc`: the op routes, the OpenAI-compatible chat), and the docs pages served from local
assets (fastapi-offline ships Swagger UI and ReDoc; no CDN, so /docs renders offline)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

#: schemas the documented bodies refer to (merged into components.schemas)
EXTRA_SCHEMAS: dict[str, Any] = {}
#: the models documented as bodies by `body_doc`, by name (with their `open_fields`)
BODY_MODELS: dict[str, tuple[type[BaseModel], str | None]] = {}
_MADE: set[str] = set()
#: where the docs pages load their scripts and styles from (no bearer needed: public code)
ASSETS_PATH = "/docs-assets"


def body_doc(model: type[BaseModel], *, open_fields: str | None = None) -> dict[str, Any]:
    """`openapi_extra=` documenting `model` as the JSON body of a route that reads the body itself.
    `open_fields`: the body may carry more fields than the model names (said so in the schema).
    The model's schema is made with the OpenAPI document (`openapi_of`), not when the route is
    declared: a process that never serves the document never builds it."""
    BODY_MODELS.setdefault(model.__name__, (model, open_fields))
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


def _body_schemas() -> None:
    """EXTRA_SCHEMAS gets the schemas of the models `body_doc` named (and the schemas they use)."""
    for name, (model, open_fields) in list(BODY_MODELS.items()):
        if name in _MADE:
            continue
        _MADE.add(name)
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        EXTRA_SCHEMAS.update(schema.pop("$defs", {}))
        if open_fields is not None:
            schema["additionalProperties"] = True
            schema["description"] = f"{schema.get('description', '')}\n\n{open_fields}".strip()
        EXTRA_SCHEMAS.setdefault(name, schema)


def openapi_of(app: FastAPI) -> dict[str, Any]:
    """The spec, built once per app."""
    if app.openapi_schema is None:
        spec = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes,
                           tags=app.openapi_tags)
        schemas = spec.setdefault("components", {}).setdefault("schemas", {})
        _body_schemas()
        for name, schema in EXTRA_SCHEMAS.items():
            schemas.setdefault(name, schema)
        _path_404s(spec)
        _sse_items(spec)
        app.openapi_schema = spec
    return app.openapi_schema


def _path_404s(spec: dict[str, Any]) -> None:
    """A path parameter holding what a path segment cannot (a newline, a `/` outside `{key:path}`)
    matches no route: the router answers 404 `not_found`, so every operation with one documents it."""
    body = {"$ref": "#/components/schemas/ErrorBody"}
    for path, item in spec.get("paths", {}).items():
        if "{" not in path:
            continue
        for op in item.values():
            responses = op.setdefault("responses", {})
            if "404" not in responses and "4XX" not in responses:
                responses["404"] = {"description": "no route matches: a path parameter a path cannot carry",
                                    "content": {"application/json": {"schema": body}}}


def _sse_items(spec: dict[str, Any]) -> None:
    """An SSE answer documented by its frames (`itemSchema`, api/sse.py) keeps no `schema` FastAPI
    adds for a route's response class (`{type: string}`): read with `itemSchema`, `schema` would
    describe the frames as a whole, and they are not one string."""
    for item in spec.get("paths", {}).values():
        for op in item.values():
            for response in op.get("responses", {}).values():
                media = response.get("content", {}).get("text/event-stream")
                if media is not None and "itemSchema" in media:
                    media.pop("schema", None)


def assets_dir() -> Path:
    """Swagger UI's and ReDoc's files, as the fastapi-offline package ships them."""
    import fastapi_offline

    return Path(fastapi_offline.__file__).parent / "static"


#: what a browser opening /docs or /redoc without the bearer gets
DOCS_LOCKED = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>treadle API docs: a token is needed</title></head>
<body style="font-family: sans-serif; max-width: 46em; margin: 3em auto; line-height: 1.5">
<h1>The API docs need the server's token</h1>
<p>This treadle runs with a bearer token (<code>TREADLE_AUTH_TOKEN</code>), and its API docs and
spec are behind it. A browser cannot send a bearer to a page it opens, so:</p>
<ul>
<li>start the server with <code>TREADLE_PUBLIC_DOCS=true</code>: <code>/docs</code>, <code>/redoc</code>
and <code>/openapi.json</code> open without a token (every API route still needs it;
<b>Authorize</b> on the page takes the token for its calls); or</li>
<li>fetch the spec with the token and read it in any OpenAPI viewer:<br>
<code>curl -H "Authorization: Bearer $TREADLE_AUTH_TOKEN" http://HOST:PORT/openapi.json &gt; treadle.json</code></li>
</ul>
<p>The API reference is also in the repository: <code>docs/api.md</code>.</p>
</body></html>
"""


def install_docs(app: FastAPI, *, behind_auth: bool) -> None:
    """/openapi.json, /docs and /redoc (behind the bearer unless TREADLE_PUBLIC_DOCS), their
    assets at ASSETS_PATH."""
    from fastapi import Depends
    from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
    from fastapi.responses import HTMLResponse, JSONResponse
    from fastapi.staticfiles import StaticFiles

    from treadle.api.deps import get_principal
    from treadle.errors import Unauthorized

    app.openapi = lambda: openapi_of(app)  # type: ignore[method-assign]
    app.mount(ASSETS_PATH, StaticFiles(directory=assets_dir()), name="docs-assets")
    auth = [Depends(get_principal)] if behind_auth else []

    @app.get("/openapi.json", include_in_schema=False, dependencies=auth)
    async def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    async def locked(request: Request) -> HTMLResponse | None:
        """A browser without the bearer (it cannot send one to a page it opens) gets a page that
        says how to open the docs; an API client gets the usual 401 JSON (issue 43 item 9)."""
        if not behind_auth:
            return None
        try:
            await get_principal(request)
        except Unauthorized:
            if "text/html" not in request.headers.get("accept", ""):
                raise
            return HTMLResponse(DOCS_LOCKED, status_code=401)
        return None

    @app.get("/docs", include_in_schema=False)
    async def docs(request: Request) -> HTMLResponse:
        if (page := await locked(request)) is not None:
            return page
        return get_swagger_ui_html(
            openapi_url="/openapi.json", title="treadle API", swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css", swagger_favicon_url=f"{ASSETS_PATH}/favicon.png",
            swagger_ui_parameters={"persistAuthorization": True})

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        if (page := await locked(request)) is not None:
            return page
        return get_redoc_html(openapi_url="/openapi.json", title="treadle API",
                              redoc_js_url=f"{ASSETS_PATH}/redoc.standalone.js",
                              redoc_favicon_url=f"{ASSETS_PATH}/favicon.png", with_google_fonts=False)
