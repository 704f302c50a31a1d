"""``/docs`` (Swagger UI) and ``/redoc`` from the files the fastapi-offline wheel ships, served by this
process: the pages work without internet, and their CSP keeps them from asking any other host (ReDoc's
sidebar would fetch a logo from its CDN)."""

from __future__ import annotations

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


def install(app: FastAPI) -> None:
    """Serve the two documentation pages and their assets (the app is made with ``docs_url=None``)."""
    static = files("fastapi_offline") / "static"
    app.mount(ASSETS, StaticFiles(directory=str(static)), name="docs-assets")
    title = app.title
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        page = get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{title} - Swagger UI",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon.png",
            swagger_ui_parameters={"validatorUrl": "none"},  # it would send the schema to swagger.io
        )
        page.headers.update(HEADERS)
        return page

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        page = get_redoc_html(
            openapi_url=openapi_url,
            title=f"{title} - ReDoc",
            redoc_js_url=f"{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS}/favicon.png",
            with_google_fonts=False,
        )
        page.headers.update(HEADERS)
        return page
