"""Scraping the API's /metrics and the worker's metrics port after real requests: the
counters, histograms and gauges move."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import DEFAULT_MODEL, Stack


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    reply = httpx.get(url, timeout=30)
    reply.raise_for_status()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(reply.text)
        for sample in family.samples
    }


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_move_after_requests(stack: Stack) -> None:
    assert stack.worker_metrics_url is not None
    api_url = f"{stack.base_url}/metrics"
    api_before, worker_before = scrape(api_url), scrape(stack.worker_metrics_url)

    body = {"model": DEFAULT_MODEL, "input": "Name a colour.", "temperature": 0,
            "max_output_tokens": 8}
    with httpx.stream("POST", f"{stack.base_url}/v1/responses", json={**body, "stream": True},
                      timeout=300) as reply:
        assert reply.status_code == 200
        sent = b"".join(reply.iter_bytes())
        assert b"event: response.completed" in sent or b"event: response.incomplete" in sent
    budget = {**body, "reasoning": {"effort": "medium"}, "thinking_token_budget": 2}
    assert httpx.post(f"{stack.base_url}/v1/responses", json=budget, timeout=300).status_code == 200
    assert httpx.post(f"{stack.base_url}/v1/responses", json={**body, "model": "no-such-model"},
                      timeout=30).status_code == 404

    api, worker = scrape(api_url), scrape(stack.worker_metrics_url)
    route = "/v1/responses"
    assert value(api, "spate_requests_total", route=route, status="200") \
        >= value(api_before, "spate_requests_total", route=route, status="200") + 2
    assert value(api, "spate_requests_total", route=route, status="404") \
        >= value(api_before, "spate_requests_total", route=route, status="404") + 1
    for histogram in ("spate_time_to_first_token_seconds", "spate_inter_token_latency_seconds",
                      "spate_end_to_end_latency_seconds"):
        assert value(api, f"{histogram}_count") >= value(api_before, f"{histogram}_count") + 2, histogram
    assert value(api, "spate_responses_in_flight") == 0
    assert value(api, "spate_nats_connected") == 1
    assert 0 < value(api, "spate_nats_rtt_seconds") < 5
    # The model's request queue: nothing waiting, nothing unacknowledged once both ended.
    assert ("spate_queue_pending_requests", (("model", DEFAULT_MODEL),)) in api
    assert value(api, "spate_queue_ack_pending_requests", model=DEFAULT_MODEL) == 0

    generated = value(worker, "spate_worker_generated_tokens_total")
    assert generated >= value(worker_before, "spate_worker_generated_tokens_total") + 16
    assert value(worker, "spate_worker_prefilled_tokens_total") \
        > value(worker_before, "spate_worker_prefilled_tokens_total")
    assert value(worker, "spate_worker_reasoning_budget_cutoffs_total") \
        >= value(worker_before, "spate_worker_reasoning_budget_cutoffs_total") + 1
    assert value(worker, "spate_worker_step_seconds_count") \
        >= value(worker_before, "spate_worker_step_seconds_count") + 16
    free, used = value(worker, "spate_worker_kv_blocks_free"), value(worker, "spate_worker_kv_blocks_used")
    assert free > 0 and free + used > 0
    assert ("spate_worker_running_sequences", ()) in worker
    assert ("spate_worker_preemptions_total", ()) in worker
    assert 0 <= value(worker, "spate_worker_prefix_cache_hit_ratio") <= 1
