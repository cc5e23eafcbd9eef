"""The web page: `GET /ui` (and `/` redirects there) — the runs as a tree (a sub-agent under its
parent, its pending question shown on the parent), one run's events live, a pending-questions inbox,
steering, start and cancel (watch.js); the library of agent and skill defs (create, fork, promote,
retire, a diff between versions), schedules, webhooks and channels (panels.js) — over the same API a
client uses.

The page holds no data and needs no login to load; every call it makes carries the bearer token
the user types in (kept in the tab's sessionStorage), so it shows exactly what that token may see.
Its files are served with a strict Content-Security-Policy (scripts and styles from this origin
only, no inline code), and it renders model and tool output as text, never as HTML.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from treadle.errors import NotFound

router = APIRouter(tags=["ui"])

ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "events.js": "text/javascript; charset=utf-8",
    "watch.js": "text/javascript; charset=utf-8",
    "panels.js": "text/javascript; charset=utf-8",
    "watch.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}


@cache
def asset(name: str) -> bytes:
    return resources.files("treadle.api.watch").joinpath(name).read_bytes()


def _serve(name: str) -> Response:
    if name not in ASSETS:
        raise NotFound(f"no such file {name!r} in the watch page")
    return Response(asset(name), media_type=ASSETS[name], headers=HEADERS)


@router.get("/", include_in_schema=False)
async def root() -> RedirectResponse:
    return RedirectResponse("/ui", status_code=307)


@router.get("/favicon.ico", include_in_schema=False)
async def favicon() -> Response:
    """What a browser asks every page of this origin for (an SVG; no 404 in its console)."""
    return _serve("favicon.svg")


@router.get("/ui", include_in_schema=False)
async def page() -> Response:
    return _serve("index.html")


@router.get("/ui/{name}", include_in_schema=False)
async def file(name: str) -> Response:
    return _serve(name)
