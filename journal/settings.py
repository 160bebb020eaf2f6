"""The NATS settings every spate process shares, read from SPATE_* environment variables.

The API's and the worker's settings classes extend this one, so each value has one
definition and one default.
"""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class JournalSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPATE_", extra="ignore")

    # One server, or the nodes of a cluster separated by commas.
    nats_url: str = "nats://127.0.0.1:4222"
    # How long one NATS operation may take before it counts as failed.
    nats_timeout_s: float = Field(default=2.0, gt=0)
    # How long `spate events tail`, the usage meter and a worker wait for NATS when they
    # start before they say they cannot reach it and exit non-zero. (The API serves
    # 503s until NATS answers instead; a connection lost later is waited out.)
    nats_connect_wait_s: float = Field(default=10.0, gt=0)
    # How long the EVENTS stream keeps a response's log: the window for resuming a stream
    # and for a replacement worker to continue a dead worker's response.
    events_max_age_s: float = Field(default=24 * 3600, gt=0)
    # JetStream redelivers a request whose worker stopped acking for this long, at most
    # `max_deliver` times; the API gives a started response whose model has no live
    # worker this long to be picked up again before it fails it (worker_lost).
    ack_wait_s: float = Field(default=30.0, gt=1)
    max_deliver: int = Field(default=5, ge=1)
    # A worker's liveness key lives this long unless its heartbeat renews it.
    worker_ttl_s: float = Field(default=10.0, gt=0)
    # Copies JetStream keeps of each stream and bucket: 1 for one server; 3 on a
    # three-node cluster, so losing one node loses nothing.
    stream_replicas: int = Field(default=1, ge=1, le=5)
    # On SIGTERM, how long running responses get to finish: a worker's before it hands
    # the rest back to the queue, an API replica's open streams before it cuts them.
    drain_timeout_s: float = Field(default=30.0, ge=0)
    # How long open streams and unsent events wait for NATS to come back (a restart)
    # before they fail.
    nats_outage_s: float = Field(default=30.0, ge=0)
    # Authentication, each optional: user and password, a token, an nkey seed file or a
    # .creds file (user JWT and nkey). Never logged.
    nats_user: str | None = None
    nats_password: SecretStr | None = None
    nats_token: SecretStr | None = None
    nats_nkey_seed_file: str | None = None
    nats_creds_file: str | None = None
    # TLS: the CA that signed the server's certificate, and a client certificate and key
    # where the server asks for one. Any of them turns TLS on.
    nats_tls_ca_file: str | None = None
    nats_tls_cert_file: str | None = None
    nats_tls_key_file: str | None = None
