"""Reaching a NATS server that wants credentials or TLS, and never logging a secret."""

from __future__ import annotations

import asyncio
import logging
import subprocess
from pathlib import Path

import pytest

from cli.nats_server import EmbeddedNats
from journal import Journal, JournalSettings

SECRET = "s3cret-pass-word"


async def reaches(settings: JournalSettings, within: float = 5.0) -> bool:
    journal = Journal(settings, name="spate-auth-test")
    journal.start()
    try:
        await asyncio.wait_for(journal.wait_connected(), within)
        await journal.registry.live_models()  # a real JetStream call on the connection
        return True
    except asyncio.TimeoutError:
        return False
    finally:
        await journal.close()


async def test_user_and_password(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with EmbeddedNats(extra_args=("--user", "spate", "--pass", SECRET)) as server:
        assert await reaches(JournalSettings(nats_url=server.url, nats_user="spate",
                                             nats_password=SECRET))
        assert not await reaches(JournalSettings(nats_url=server.url, nats_user="spate",
                                                 nats_password="wrong"), within=2.0)
        in_url = server.url.replace("nats://", f"nats://spate:{SECRET}@")
        assert await reaches(JournalSettings(nats_url=in_url))
    assert SECRET not in caplog.text


async def test_token(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with EmbeddedNats(extra_args=("--auth", SECRET)) as server:
        assert await reaches(JournalSettings(nats_url=server.url, nats_token=SECRET))
        assert not await reaches(JournalSettings(nats_url=server.url), within=2.0)
    assert SECRET not in caplog.text


def make_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 it signed."""
    ca_key, ca_cert = folder / "ca.key", folder / "ca.pem"
    key, csr, cert = folder / "server.key", folder / "server.csr", folder / "server.pem"
    ext = folder / "ext.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    run = lambda *args: subprocess.run(["openssl", *args], check=True, capture_output=True)  # noqa: E731
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out",
        str(ca_cert), "-days", "1", "-subj", "/CN=spate-test-ca")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
        "-subj", "/CN=127.0.0.1")
    run("x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key),
        "-CAcreateserial", "-out", str(cert), "-days", "1", "-extfile", str(ext))
    return ca_cert, cert, key


async def test_tls(tmp_path: Path) -> None:
    ca, cert, key = make_certificates(tmp_path)
    args = ("--tls", "--tlscert", str(cert), "--tlskey", str(key))
    with EmbeddedNats(extra_args=args) as server:
        assert await reaches(JournalSettings(nats_url=server.url, nats_tls_ca_file=str(ca)))
        assert not await reaches(JournalSettings(nats_url=server.url), within=2.0)
