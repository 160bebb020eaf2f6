"""The model registry and per-worker liveness, against a real nats-server."""

from __future__ import annotations

from events import ModelCard, ModelLoadFailure
from harness.waits import until
from journal import Journal


async def test_a_model_is_live_while_any_of_its_workers_is(journal: Journal) -> None:
    card = ModelCard(name="registry-model", context_length=2048)
    await journal.registry.advertise(card)
    assert await journal.registry.card("registry-model") == card
    assert await journal.registry.card("no-such-model") is None
    assert not await journal.registry.is_live("registry-model")

    await journal.registry.heartbeat(card.name, "worker-a")
    await journal.registry.heartbeat(card.name, "worker-b")
    assert "registry-model" in {c.name for c in await journal.registry.live_models()}

    await journal.registry.withdraw(card.name, "worker-a")
    journal.registry._live_seen.clear()  # judge the bucket, not the short-lived cache
    assert await journal.registry.is_live("registry-model")

    await journal.registry.withdraw(card.name, "worker-b")
    journal.registry._live_seen.clear()
    assert not await journal.registry.is_live("registry-model")
    assert "registry-model" not in {c.name for c in await journal.registry.live_models()}


async def test_a_model_name_with_dots_keeps_its_workers_apart(journal: Journal) -> None:
    card = ModelCard(name="org/model.v1", context_length=2048)
    await journal.registry.advertise(card)
    await journal.registry.heartbeat(card.name, "host.1")
    assert await journal.registry.is_live("org/model.v1")
    assert not await journal.registry.is_live("org/model")
    await journal.registry.withdraw(card.name, "host.1")


async def test_liveness_follows_heartbeats_and_withdrawals_without_a_read(journal: Journal) -> None:
    card = ModelCard(name="pushed-model", context_length=2048)
    await journal.registry.advertise(card)
    assert not await journal.registry.is_live("pushed-model")  # starts following writes

    await journal.registry.heartbeat(card.name, "worker-a")
    assert await until(lambda: "pushed-model" in journal.registry._live_seen, 5)
    assert await journal.registry.is_live("pushed-model")

    await journal.registry.withdraw(card.name, "worker-a")
    assert await until(lambda: "pushed-model" not in journal.registry._live_seen, 5)
    assert not await journal.registry.is_live("pushed-model")


async def test_a_load_failure_is_kept_until_a_worker_loads_the_model(journal: Journal) -> None:
    failure = ModelLoadFailure(name="broken-model", source="/models/broken.gguf",
                               reason="unsupported GGUF architecture 'mamba'", worker_id="w1")
    assert await journal.registry.load_failure("broken-model") is None
    await journal.registry.report_load_failure(failure)
    assert await journal.registry.load_failure("broken-model") == failure
    assert failure in await journal.registry.load_failures()

    await journal.registry.clear_load_failure("broken-model")
    assert await journal.registry.load_failure("broken-model") is None
    assert failure not in await journal.registry.load_failures()
    await journal.registry.clear_load_failure("never-failed")  # nothing to clear: no error
