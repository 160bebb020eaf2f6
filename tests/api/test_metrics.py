"""GET /metrics of an API whose NATS is away: requests are counted by route template and
status, and the scrape itself still answers."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families


async def samples(client: httpx.AsyncClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    reply = await client.get("/metrics")
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(reply.text)
        for sample in family.samples
    }


async def test_requests_are_counted_by_route_and_status(client: httpx.AsyncClient) -> None:
    assert (await client.post("/v1/responses", json={"model": "m", "bogus": 1})).status_code == 400
    assert (await client.get("/v1/responses/resp_123")).status_code == 404
    assert (await client.get("/no/such/path")).status_code == 404
    found = await samples(client)

    def count(route: str, status: str) -> float:
        return found.get(("spate_requests_total", (("route", route), ("status", status))), 0.0)

    assert count("/v1/responses", "400") == 1
    assert count("/v1/responses/{response_id}", "404") == 1
    assert count("unmatched", "404") == 1
    assert not any("resp_123" in str(labels) for _, labels in found)
    assert found[("spate_nats_connected", ())] == 0
    assert found[("spate_responses_in_flight", ())] == 0
