"""GET /: the browser playground, a static page (api/static/) that calls the public API."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"

router = APIRouter()


@router.get("/", include_in_schema=False)
async def playground() -> FileResponse:
    # Loading the page needs no key: it holds no data, and asks for a key when the API
    # does (each call it makes goes through that route's own key check).
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html")


def install_playground(app: FastAPI) -> None:
    """The page at `/`, its script and stylesheet under `/static/`."""
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
