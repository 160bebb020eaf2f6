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


def test_a_response_timer_observes_once_at_the_end() -> None:
    from api.metrics import ApiMetrics, ResponseTimer

    metrics = ApiMetrics()
    now = [10.0]
    timer = ResponseTimer(metrics, lambda: now[0])
    timer.tokens(1, 10.5)  # the first token, half a second in
    timer.tokens(2, 10.7)
    timer.tokens(1, 10.9)  # three more tokens over 0.4 s: 0.133 s apart on average
    now[0] = 11.0
    timer.finish()
    timer.finish()  # a second end is not a second sample

    def sample(name: str) -> float:
        value = metrics.registry.get_sample_value(name)
        assert value is not None, name
        return value

    assert sample("spate_time_to_first_token_seconds_count") == 1
    assert abs(sample("spate_time_to_first_token_seconds_sum") - 0.5) < 1e-9
    assert abs(sample("spate_inter_token_latency_seconds_sum") - 0.4 / 3) < 1e-9
    assert sample("spate_end_to_end_latency_seconds_count") == 1
    assert abs(sample("spate_end_to_end_latency_seconds_sum") - 1.0) < 1e-9
