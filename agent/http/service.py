"""The service routes: readiness and health (open), the OpenAPI schema and Swagger UI (behind an API key), the web
chat page."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response

from agent.http.deps import CALLER, Rag

WEB_DIR = Path(__file__).resolve().parent / "web"
"""Where the web chat page (`index.html`, its script `page.js` and style sheet `page.css`) lives."""
WEB_FILES = {"page.js": "text/javascript", "page.css": "text/css"}
"""The page's static files under `/web/` and their media types (no other file of `WEB_DIR` is served)."""

router = APIRouter()


@router.get("/ready", include_in_schema=False)
async def ready() -> JSONResponse:
    """Readiness of this process alone (the readiness probe): 200 whenever it serves requests (the server accepts
    connections only once start-up has opened the app), touching no dependency, so one slow shared dependency cannot
    take every replica out of the Service at once; `/health` reports the dependencies. While draining the shutdown
    middleware answers 503 instead. Open without the API key."""
    return JSONResponse({"ok": True})


@router.get("/health")
async def health(rag: Rag) -> JSONResponse:
    """Each dependency's check, each bounded by `HEALTH_CHECK_TIMEOUT_S`; HTTP 200 when all pass, else 503. Open
    without the API key."""
    checks = await rag.health()
    ok = all(bool(c["ok"]) for c in checks.values())
    return JSONResponse({"ok": ok, "checks": checks}, status_code=200 if ok else 503)


@router.get("/openapi.json", include_in_schema=False, dependencies=[CALLER])
async def openapi(request: Request) -> JSONResponse:
    """The OpenAPI schema."""
    return JSONResponse(request.app.openapi())


@router.get("/docs", include_in_schema=False, dependencies=[CALLER])
async def docs() -> HTMLResponse:
    """Swagger UI over `/openapi.json`."""
    return get_swagger_ui_html(openapi_url="/openapi.json", title="triton-rag API")


@router.get("/", include_in_schema=False)
async def index() -> FileResponse:
    """The web chat page (asks for the API key once when the server wants one)."""
    return FileResponse(WEB_DIR / "index.html", media_type="text/html")


@router.get("/web/{name}", include_in_schema=False)
async def web_file(name: str) -> Response:
    """A static file of the page (`WEB_FILES`); any other name is 404. Open without the API key, like the page."""
    if name not in WEB_FILES:
        return JSONResponse({"error": "not_found", "detail": f"no web file {name!r}"}, status_code=404)
    return FileResponse(WEB_DIR / name, media_type=WEB_FILES[name])
