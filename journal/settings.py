"""The NATS settings every spate process shares, read from SPATE_* environment variables.

The API's and the worker's settings classes extend this one, so each value has one
definition and one default. Each field's `description` is its row in
docs/configuration.md (`python -m cli.configuration_doc`).
"""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class JournalSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPATE_", extra="ignore")

    nats_url: str = Field(
        default="nats://127.0.0.1:4222",
        description="NATS server, or a cluster's nodes separated by commas; `spate serve` "
        "starts an embedded one unless this is set. Unset, the other commands (`spate events "
        "tail`, `spate api`, `spate worker`, `spate store`, the usage meter) first look for a "
        "running `spate serve` started from the same folder (it records its NATS in "
        "`.spate/serve.json` while it runs); `--nats-url` wins over both. Each says in its "
        "first log line which URL it took and from where. Fencing stale workers needs "
        "nats-server 2.11 or later (an older one works unfenced, with a warning)")
    # Copies of each stream and bucket: 3 on a three-node cluster, so losing one node
    # loses nothing.
    stream_replicas: int = Field(
        default=1, ge=1, le=5,
        description="copies JetStream keeps of every stream and bucket: `3` on a three-node "
        "cluster, so losing a node loses nothing (`docker compose --profile cluster`; "
        "docs/reliability.md)")
    nats_timeout_s: float = Field(
        default=2.0, gt=0,
        description="a NATS call slower than this is a 503",
        json_schema_extra={"processes": "api"})
    # A connection lost later is waited out (nats_outage_s) instead.
    nats_connect_wait_s: float = Field(
        default=10.0, gt=0,
        description="how long these wait for NATS when they start; past it they say so in "
        "one line naming the URL and where it came from, and exit with status 1 (`spate "
        "events tail --connect-wait`). The API starts without NATS and answers 503 until it "
        "comes",
        json_schema_extra={"processes": "worker, events tail, usage meter"})
    # The window for resuming a stream and for a replacement worker to continue a dead
    # worker's response.
    events_max_age_s: float = Field(
        default=24 * 3600, gt=0,
        description="how long the event streams keep a response",
        json_schema_extra={"processes": "api, worker"})
    # The API also gives a started response whose model has no live worker this long to
    # be picked up again before it fails it (worker_lost).
    ack_wait_s: float = Field(
        default=30.0, gt=1,
        description="a request whose worker stops heartbeating is redelivered after this",
        json_schema_extra={"processes": "worker"})
    max_deliver: int = Field(
        default=5, ge=1,
        description="delivery attempts before a response fails with `worker_lost`",
        json_schema_extra={"processes": "worker"})
    worker_ttl_s: float = Field(
        default=10.0, gt=0,
        description="a model with no worker heartbeat for this long answers 503 (a worker's "
        "liveness key lives this long unless its heartbeat renews it)",
        json_schema_extra={"processes": "api, worker"})
    drain_timeout_s: float = Field(
        default=30.0, ge=0,
        description="on SIGTERM, how long running responses get to finish: a worker then "
        "hands the rest back to the queue; an API replica answers new requests with 503 "
        "meanwhile and then cuts its open streams with a resumable `error` event "
        "(`server_shutting_down`), never cancelling their generation",
        json_schema_extra={"processes": "api, worker"})
    nats_outage_s: float = Field(
        default=30.0, ge=0,
        description="how long open streams and unsent events wait for NATS to come back (a "
        "restart) before they fail")
    # Authentication, each optional; never logged.
    nats_user: str | None = Field(
        default=None,
        description="NATS user and password (or in the URL: `nats://user:pass@host:4222`); "
        "never logged")
    nats_password: SecretStr | None = Field(default=None, json_schema_extra={"row": "nats_user"})
    nats_token: SecretStr | None = Field(
        default=None,
        description="NATS token, nkey seed file or `.creds` file (user JWT and nkey)")
    nats_nkey_seed_file: str | None = Field(default=None, json_schema_extra={"row": "nats_token"})
    nats_creds_file: str | None = Field(default=None, json_schema_extra={"row": "nats_token"})
    # Any of them turns TLS on.
    nats_tls_ca_file: str | None = Field(
        default=None,
        description="TLS to NATS: the CA of the server's certificate, and a client "
        "certificate and key where the server asks for one")
    nats_tls_cert_file: str | None = Field(default=None,
                                           json_schema_extra={"row": "nats_tls_ca_file"})
    nats_tls_key_file: str | None = Field(default=None,
                                          json_schema_extra={"row": "nats_tls_ca_file"})
