"""GET /metrics: the API replica's Prometheus metrics (api/metrics.py). Unauthenticated,
like /health: it names models and counts, never request contents."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from api.deps import AdmissionDep, JournalDep, MetricsDep, StoreDep
from store.projector import DURABLE_NAME

router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def metrics(
    journal: JournalDep, admission: AdmissionDep, registry: MetricsDep, store: StoreDep
) -> Response:
    projection = DURABLE_NAME if store is not None else None
    body = await registry.scrape(journal, admission, projection)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
