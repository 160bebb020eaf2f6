"""`spate serve | api | worker | store | events | models`: the entry points people run."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from api.lowering.encrypted_content import KEY_FILE_ENV, new_key
from api.settings import ApiSettings
from cli import events_command, models_command, store_rebuild
from cli.log_format import configure_logging, logs_json
from cli.nats_address import use_nats_address
from cli.nats_server import EmbeddedNats
from cli.redis_server import EmbeddedRedis
from cli.serve_record import remove_serve_record, write_serve_record
from cli.settings import DEFAULT_KEY_FILE, DEFAULT_STORE_DIR, CliSettings
from cli.supervisor import Supervisor
from journal import JournalUnavailable
from workers.settings import WorkerSettings

DTYPES = ["auto", "float32", "bfloat16", "float16"]
WEIGHTS = ["auto", "quantized", "bf16"]
# Kept across runs, unlike the embedded NATS data: stored responses outlive a restart.


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spate", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="embedded NATS, one worker and the API")
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=int, default=None)
    serve.add_argument("--nats-port", type=int, default=None,
                       help="port of the embedded nats-server (default: a free one)")
    serve.add_argument("--nats-store-dir", default=None,
                       help="JetStream data folder of the embedded nats-server (default: a temporary one)")
    serve.add_argument("--store", action="store_true",
                       help="run the response store: an embedded redis-server (unless "
                       "SPATE_STORE_URL names one)")
    serve.add_argument("--store-dir", default=None,
                       help=f"data folder of the embedded redis-server (default: {DEFAULT_STORE_DIR})")
    serve.add_argument("--store-port", type=int, default=None,
                       help="port of the embedded redis-server (default: a free one)")
    serve.add_argument("--model", default=None, help="served name, .gguf file or model folder")
    serve.add_argument("--kernels", default=None, choices=["auto", "triton", "cpu", "torch"],
                       help="compute ops (default auto: triton on CUDA; on a CPU the fused "
                       "C++ ops where they build, torch otherwise)")
    serve.add_argument("--num-threads", type=int, default=None,
                       help="the worker's decode threads on a CPU (default: every usable "
                       "core; prefill uses every core)")
    serve.add_argument("--dtype", default=None, choices=DTYPES,
                       help="model dtype (default auto: bfloat16 on a GPU; float32 on a CPU, "
                       "its linears computing in bfloat16 where the CPU has native bf16)")
    serve.add_argument("--weights", default=None, choices=WEIGHTS,
                       help="linear weights on a CPU: the GGUF file's quantized groups, or bf16: "
                       "dense in the model's dtype (default auto: quantized where the fused "
                       "CPU ops run on a quantized GGUF file, else bf16)")
    serve.add_argument("--metrics-port", type=int, default=None,
                       help="serve the worker's Prometheus metrics on this port (default: "
                       "none; the API's are on its own port at /metrics)")

    api = commands.add_parser("api", help="the HTTP API alone")
    api.add_argument("--host", default=None)
    api.add_argument("--port", type=int, default=None)
    api.add_argument("--nats-url", default=None)
    api.add_argument("--store-url", default=None, help="the response store, redis://host:port/db")

    worker = commands.add_parser("worker", help="one model worker alone")
    worker.add_argument("--model", default=None)
    worker.add_argument("--served-model-name", default=None)
    worker.add_argument("--kernels", default=None, choices=["auto", "triton", "cpu", "torch"],
                        help="compute ops (default auto: triton on CUDA; on a CPU the fused "
                        "C++ ops where they build, torch otherwise)")
    worker.add_argument("--dtype", default=None, choices=DTYPES,
                        help="model dtype (default auto: bfloat16 on a GPU; float32 on a CPU, "
                        "its linears computing in bfloat16 where the CPU has native bf16)")
    worker.add_argument("--weights", default=None, choices=WEIGHTS,
                        help="linear weights on a CPU: the GGUF file's quantized groups, or bf16: "
                        "dense in the model's dtype (default auto: quantized where the fused "
                        "CPU ops run on a quantized GGUF file, else bf16)")
    worker.add_argument("--max-num-seqs", type=int, default=None)
    worker.add_argument("--num-threads", type=int, default=None,
                        help="decode threads on a CPU (default: every usable core; prefill "
                        "uses every core)")
    worker.add_argument("--nats-url", default=None)
    worker.add_argument("--metrics-port", type=int, default=None,
                        help="serve Prometheus metrics on this port (default: none)")

    events_command.add_parser(commands)
    models_command.add_parser(commands)

    store = commands.add_parser(
        "store", help="the store's projection alone (API replicas with the store on run one too)")
    store.add_argument("--nats-url", default=None)
    store.add_argument("--store-url", default=None, help="the response store, redis://host:port/db")
    store_rebuild.add_parser(store)
    return parser


def _overrides(args: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}


class _QuietProbes(logging.Filter):
    """Drop access-log lines of health and readiness probes; keep every other request."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(probe in record.getMessage() for probe in ('"GET /ready ', '"GET /health '))


def run_api(args: argparse.Namespace) -> None:
    import uvicorn

    from api.app import create_app
    from api.guards.drain import Drain
    from api.guards.http_limits import server_options
    from api.server import DrainingServer, open_without_keys

    settings = ApiSettings(**_overrides(args, ["host", "port", "store_url"]))
    use_nats_address(settings, args.nats_url)
    logging.getLogger("uvicorn.access").addFilter(_QuietProbes())
    # JSON logs: uvicorn's own loggers go through the root handler (one format a line).
    json_logs = CliSettings().log_format == "json"
    drain = Drain(settings.drain_timeout_s)
    app = create_app(settings, drain)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level="info",
                            timeout_graceful_shutdown=5, **server_options(settings),
                            log_config=None if json_logs else uvicorn.config.LOGGING_CONFIG)
    exposed = open_without_keys(settings)
    if exposed is not None:
        logging.getLogger("spate.api").warning(exposed)
    DrainingServer(config, drain).run()


def run_worker(args: argparse.Namespace) -> int:
    """0 once stopped; 78 (EX_CONFIG) when its model cannot load, the reason logged in one
    line and published for the API."""
    from workers.load_failure import EXIT_CODE, ModelLoadFailed
    from workers.served_model import load_engine_model
    from workers.worker import Worker

    settings = WorkerSettings(
        **_overrides(args, ["model", "served_model_name", "kernels", "dtype", "weights", "max_num_seqs",
                            "num_threads", "metrics_port"])
    )
    address = use_nats_address(settings, args.nats_url)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await Worker(settings, load_engine_model).run(stop)

    try:
        asyncio.run(main())
    except ModelLoadFailed:
        return EXIT_CODE
    except JournalUnavailable as error:  # NATS not reached within SPATE_NATS_CONNECT_WAIT_S
        logging.getLogger("spate.worker").error("%s", address.unreachable(error))
        return 1
    return 0


def run_store(args: argparse.Namespace) -> int:
    from journal import Journal
    from store.background_slots import BackgroundSlots
    from store.projector import Projector
    from store.redis_store import RedisStore

    settings = ApiSettings(**_overrides(args, ["store_url"]))
    use_nats_address(settings, args.nats_url)
    if not settings.store_url:
        logging.getLogger("spate.store").error("no store: set SPATE_STORE_URL or --store-url")
        return 2
    store_url = settings.store_url

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        journal = Journal(settings, name="spate-store")
        store = RedisStore(store_url, settings.store_ttl_s, pool_size=settings.store_pool_size,
                           pool_wait_s=settings.store_pool_wait_s)
        slots = BackgroundSlots(store.client, settings.background_slot_ttl_s)
        projector = Projector(journal, store, slots)
        journal.start()
        projector.start()
        try:
            await stop.wait()
        finally:
            await projector.stop()
            await store.close()
            await journal.close()

    asyncio.run(main())
    return 0


def _wait_ready(
    url: str, children: Supervisor, timeout: float, stopping: Callable[[], bool] = lambda: False
) -> bool:
    """Whether `url` answered 200 before `timeout`; False at once when a child died or a
    signal asked to stop (a SIGTERM during a model's load stops its children too)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not stopping():
        if not children.check():
            return False
        try:
            with urllib.request.urlopen(url, timeout=1) as reply:
                if reply.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.3)
    return False


def serve_worker_command(args: argparse.Namespace) -> list[str]:
    """The worker `spate serve` starts. Unless told otherwise (`--num-threads`, or
    SPATE_NUM_THREADS, which the worker reads itself) it decodes on every core: the API,
    NATS and the clients take about a tenth of a core's time per token beside it, and
    on 2 cores two decode threads stream 1.16x the tokens/s of one to a single client and
    the same to 8 and 32 (docs/performance.md)."""
    command = [sys.executable, "-m", "cli.main", "worker"]
    if args.model:
        command += ["--model", args.model]
    if args.kernels:
        command += ["--kernels", args.kernels]
    if args.dtype:
        command += ["--dtype", args.dtype]
    if args.weights:
        command += ["--weights", args.weights]
    if args.metrics_port is not None:
        command += ["--metrics-port", str(args.metrics_port)]
    if args.num_threads is not None:
        command += ["--num-threads", str(args.num_threads)]
    return command


def serve_store(args: argparse.Namespace, settings: CliSettings) -> EmbeddedRedis | None:
    """The embedded redis-server `spate serve --store` runs, started; None without
    --store, or when SPATE_STORE_URL already names a store (the API child inherits it)."""
    log = logging.getLogger("spate.serve")
    if not args.store:
        return None
    if settings.store_url:
        log.info("response store at SPATE_STORE_URL")
        return None
    store = EmbeddedRedis(port=args.store_port, store_dir=settings.store_dir).start()
    log.info("embedded redis-server (response store) at %s, data in %s", store.url, settings.store_dir)
    return store


def serve_key_file(api: ApiSettings, path: str = DEFAULT_KEY_FILE) -> str | None:
    """The key file `spate serve` hands its API when no key is configured, so reasoning
    sealed for a client still opens after a restart: made once (readable by its owner
    only) and kept. None when SPATE_ENCRYPTION_KEYS or SPATE_ENCRYPTION_KEY_FILE is set."""
    if api.encryption_keys.strip() or api.encryption_key_file:
        return None
    key_file = Path(path)
    if not key_file.exists():
        key_file.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as written:
            written.write(new_key() + "\n")
        logging.getLogger("spate.serve").info("made the encryption key file %s", key_file)
    return str(key_file.resolve())


def run_serve(args: argparse.Namespace) -> int:
    log = logging.getLogger("spate.serve")
    settings = CliSettings(**_overrides(args, ["nats_store_dir", "store_dir"]))
    api = ApiSettings(**_overrides(args, ["host", "port"]))
    nats = None
    nats_url = settings.nats_url
    if not nats_url:
        nats = EmbeddedNats(port=args.nats_port, store_dir=settings.nats_store_dir).start()
        nats_url = nats.url
        log.info("embedded nats-server with JetStream at %s", nats_url)
    try:
        store = serve_store(args, settings)
    except BaseException:
        if nats is not None:
            nats.stop()
        raise
    env = {**os.environ, "SPATE_NATS_URL": nats_url}
    key_file = serve_key_file(api)
    if key_file is not None:
        env[KEY_FILE_ENV] = key_file
    if store is not None:
        env["SPATE_STORE_URL"] = store.url
    worker_cmd = serve_worker_command(args)
    api_cmd = [sys.executable, "-m", "cli.main", "api", "--host", api.host,
               "--port", str(api.port)]
    # Where the worker says why, if its model cannot load (the supervisor prints it).
    failure_dir = Path(tempfile.mkdtemp(prefix="spate-serve-"))
    failure_file = failure_dir / "worker-failure.txt"
    env["SPATE_FAILURE_FILE"] = str(failure_file)
    children = Supervisor({"worker": worker_cmd, "api": api_cmd}, env,
                          failure_files={"worker": failure_file})
    children.start()
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    host = "127.0.0.1" if api.host in ("0.0.0.0", "::") else api.host
    # Read by `spate events tail`, the usage meter and the like started from this folder.
    write_serve_record(nats_url, f"http://{host}:{api.port}")
    try:
        if _wait_ready(f"http://{host}:{api.port}/ready", children, timeout=600,
                       stopping=lambda: stopping):
            log.info("spate is ready at http://%s:%d (POST /v1/responses)", api.host, api.port)
        while not stopping and children.check():
            time.sleep(0.2)
    finally:
        remove_serve_record()
        children.stop()
        shutil.rmtree(failure_dir, ignore_errors=True)
        if nats is not None:
            nats.stop()
        if store is not None:
            store.stop()
    return 1 if children.failed is not None else 0


def main(argv: list[str] | None = None) -> int:
    try:
        return _run(argv)
    except ValidationError as error:  # a SPATE_* variable out of its range: say which
        problems = "; ".join(f"SPATE_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}"
                             for e in error.errors())
        if logs_json():
            logging.getLogger("spate").error("invalid setting: %s", problems)
        else:
            print(f"spate: invalid setting: {problems}", file=sys.stderr)
        return 2


def _run(argv: list[str] | None) -> int:
    cli_settings = CliSettings()
    configure_logging(cli_settings.log_level, cli_settings.log_format)
    args = _parser().parse_args(argv)
    if args.command == "api":
        run_api(args)
    elif args.command == "worker":
        return run_worker(args)
    elif args.command == "store":
        return store_rebuild.run_rebuild(args) if args.store_command == "rebuild" else run_store(args)
    elif args.command == "events":
        return events_command.run_events(args)
    elif args.command == "models":
        return models_command.run_models(args)
    else:
        return run_serve(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
