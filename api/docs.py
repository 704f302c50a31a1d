"""``/docs`` (Swagger UI) and ``/redoc`` from the files the fastapi-offline wheel ships, served by this
process: the pages work without internet, and their CSP keeps them from asking any other host (ReDoc's
sidebar would fetch a logo from its CDN). ``/``, the URL ``parkway up`` prints first, says where the
pages and the API's own description are."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from importlib.resources import files

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs-assets"
# Scripts and styles are the pages' own (inline or from ASSETS); nothing is fetched from another host.
CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; worker-src 'self' blob:"
)
HEADERS = {"Content-Security-Policy": CSP, "Cache-Control": "no-store"}
INDEX = {
    "service": "parkway",
    "decisions": "/decisions",
    "runs": "/runs",
    "docs": "/docs",
    "redoc": "/redoc",
    "openapi": "/openapi.json",
    "healthz": "/healthz",
    "readyz": "/readyz",
    "metrics": "/metrics",
}


def install(app: FastAPI) -> None:
    """Serve the two documentation pages and their assets (the app is made with ``docs_url=None``)."""
    app.mount(ASSETS, StaticFiles(directory=str(files("fastapi_offline") / "static")), name="docs-assets")
    openapi_url, favicon = app.openapi_url or "/openapi.json", f"{ASSETS}/favicon.png"
    pages: dict[str, Callable[[], HTMLResponse]] = {
        "/docs": partial(
            get_swagger_ui_html,
            openapi_url=openapi_url,
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=favicon,
            swagger_ui_parameters={"validatorUrl": "none"},  # it would send the schema to swagger.io
        ),
        "/redoc": partial(
            get_redoc_html,
            openapi_url=openapi_url,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=favicon,
            with_google_fonts=False,
        ),
    }
    for path, render in pages.items():
        app.add_api_route(path, _endpoint(render), methods=["GET"], include_in_schema=False)
    app.add_api_route("/", _index, methods=["GET"], include_in_schema=False)


async def _index() -> dict[str, str]:
    return INDEX


def _endpoint(render: Callable[[], HTMLResponse]) -> Callable[[], Awaitable[HTMLResponse]]:
    async def page() -> HTMLResponse:
        response = render()
        response.headers.update(HEADERS)
        return response

    return page
