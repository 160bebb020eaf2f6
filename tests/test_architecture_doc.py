"""docs/architecture.md's diagrams name only what the code has: every NATS subject, stream,
consumer and bucket, every event type, every class and every path in its mermaid blocks
is looked up in the code, so a rename that leaves the pictures behind fails here."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest

from events import subjects
from events.codec import AnyEvent
from store.projector import DURABLE_NAME

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "architecture.md"
PACKAGES = ("api", "cli", "events", "journal", "store", "workers")

# Words of the diagrams' prose that look like class names.
PROSE = {"JetStream", "WebSocket"}
# A subject's placeholders as the diagrams write them, and a value for each.
PLACEHOLDERS = {"<model>": "m", "<worker id>": "w", "<response id>": "r"}


def diagrams() -> str:
    """The mermaid blocks' text, with their line breaks (<br/>) as new lines and mermaid's
    #lt; and #gt; as < and >."""
    blocks = re.findall(r"```mermaid\n(.*?)```", PAGE.read_text(), re.DOTALL)
    text = "\n".join(blocks).replace("<br/>", "\n")
    return text.replace("#lt;", "<").replace("#gt;", ">")


def known_names() -> set[str]:
    """Every NATS name spate uses, with the diagrams' placeholders for its parts."""
    m, w, r = PLACEHOLDERS.values()
    names = {
        subjects.request_subject(m), subjects.direct_subject(m, w), subjects.events_subject(r),
        subjects.live_events_subject(r), subjects.cancel_subject(r), subjects.lease_subject(r),
        subjects.cache_subject(m, w), subjects.count_subject(m), subjects.worker_consumer(m),
        subjects.direct_consumer(m, w), subjects.counters_queue(m), DURABLE_NAME,
        f"{subjects.EVENTS_SUBJECT_PREFIX}.>", f"{subjects.LIVE_EVENTS_SUBJECT_PREFIX}.>",
    }
    return {re.sub(r"(?<=[.-])([mwr])(?=$|[.-])", lambda found: {
        value: key for key, value in PLACEHOLDERS.items()}[found.group(1)], name)
        for name in names}


def nats_names(text: str) -> set[str]:
    placeholder = "|".join(re.escape(key) for key in PLACEHOLDERS)
    part = rf"(?:[a-z]+|{placeholder}|>)"
    return set(re.findall(rf"\bspate[.-]{part}(?:[.-]{part})*", text))


def event_types() -> set[str]:
    union = typing.get_args(typing.get_args(AnyEvent)[0])
    return {event.model_fields["type"].default for event in union}


def source_text() -> str:
    return "\n".join(path.read_text() for package in PACKAGES
                     for path in (ROOT / package).rglob("*.py"))


def test_every_subject_stream_consumer_and_bucket_is_the_codes() -> None:
    text = diagrams()
    found = nats_names(text)
    assert {"spate.events.<response id>", "spate.live.events.<response id>",
            "spate-workers-<model>"} <= found  # the reader finds them
    assert found - known_names() == set(), "named in the diagrams, unknown to events/subjects.py"
    streams_and_buckets = set(re.findall(r"\b(?:SPATE_[A-Z_]+|spate_[a-z_]+)\b", text))
    constants = {value for value in vars(subjects).values() if isinstance(value, str)}
    settings = {"SPATE_STORE_URL", "SPATE_STORE_PROJECTOR"}
    assert {"SPATE_EVENTS", "SPATE_REQUESTS", "spate_models"} <= streams_and_buckets
    assert streams_and_buckets - constants - settings == set()
    assert settings <= set(re.findall(r"`(SPATE_[A-Z_]+)`",
                                      (ROOT / "docs" / "configuration.md").read_text()))


def test_every_event_type_is_one_the_codec_decodes() -> None:
    text = diagrams()
    named = set(re.findall(r"\b(?:request|generation|tokens|reasoning|tool_call|cancel)"
                           r"\.[a-z_]+\b", text))
    assert {"request.accepted", "tokens.generated", "generation.finished"} <= named
    assert named - event_types() == set()


def test_every_sse_event_is_one_the_fold_emits() -> None:
    fold = (ROOT / "events" / "fold.py").read_text()
    named = set(re.findall(r"\bresponse\.[a-z_]+(?:\.[a-z_]+)?\b", diagrams()))
    assert "response.output_text.delta" in named
    missing = {name for name in named
               if f'"{name}"' not in fold and f'"{name}"' not in source_text()}
    assert missing == set()


def test_every_class_and_path_exists() -> None:
    text = diagrams()
    classes = set(re.findall(r"\b[A-Z][a-z]+(?:[A-Z][a-z]+)+\b", text)) - PROSE
    assert {"LiveFeed", "LogFollower", "ResponseFold", "RequestAccepted"} <= classes
    source = source_text()
    assert {name for name in classes if f"class {name}" not in source} == set()
    functions = {"publish_request"}
    assert all(f"def {name}(" in source for name in functions)
    paths = set(re.findall(r"\b[a-z_]+/(?:[a-z_]+/)*(?:[a-z_]+(?:\.py)?)?", text))
    assert {"api/", "api/lowering", "examples/usage_meter.py"} <= paths
    assert {path for path in paths if not (ROOT / path).exists()} == set()


@pytest.mark.parametrize("name", ["spate.requests.<model>.to.<worker id>",
                                  "spate-workers-<model>-<worker id>"])
def test_the_placeholders_stand_for_one_token(name: str) -> None:
    assert name in known_names()
