"""`spate store rebuild`: refill the response store (an empty Redis after a loss, or one
that missed events) from the event log, within the log's retention (store/rebuild.py)."""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import TYPE_CHECKING, Any

from api.settings import ApiSettings
from cli.nats_address import use_nats_address, where
from journal import Journal, JournalUnavailable

if TYPE_CHECKING:
    from store.rebuild import RebuildReport

log = logging.getLogger("spate.store")

CONNECT_WAIT_S = 10.0


def add_parser(store: Any) -> None:
    """`rebuild` under `spate store` (which alone runs the projection)."""
    actions = store.add_subparsers(dest="store_command")
    rebuild = actions.add_parser(
        "rebuild", help="refill the store from the event log (what the log still holds); "
        "safe to run again, and beside running projectors")
    # SUPPRESS: given before `rebuild` (spate store --store-url X rebuild), they stand.
    rebuild.add_argument("--nats-url", default=argparse.SUPPRESS)
    rebuild.add_argument("--store-url", default=argparse.SUPPRESS,
                         help="the response store, redis://host:port/db")
    rebuild.add_argument("--connect-wait", type=float, default=CONNECT_WAIT_S,
                         help="seconds to wait for NATS before giving up")


def run_rebuild(args: argparse.Namespace) -> int:
    from store.errors import StoreUnavailable  # the store's modules load only when used

    overrides = {"store_url": args.store_url} if getattr(args, "store_url", None) else {}
    settings = ApiSettings(**overrides)
    address = use_nats_address(settings, getattr(args, "nats_url", None))
    if not settings.store_url:
        log.error("no store: set SPATE_STORE_URL or --store-url")
        return 2
    try:
        report = asyncio.run(rebuild(settings, settings.store_url, args.connect_wait))
    except JournalUnavailable as error:
        log.error("%s (NATS from %s); what was rebuilt stays, run it again", error, address.source)
        return 1
    except StoreUnavailable as error:
        log.error("the store is unavailable: %s; what was rebuilt stays, run it again", error)
        return 1
    log.info("rebuilt %d responses from %d events in %.2f s (%.0f responses/s); left out: "
             "%d store=false, %d aged out of the log, %d failed (dead letters), %d undecodable",
             report.responses, report.events, report.seconds, report.responses_per_s,
             report.unstored, report.aged_out, report.failed, report.undecodable)
    return 0


async def rebuild(settings: ApiSettings, store_url: str, connect_wait_s: float) -> RebuildReport:
    from store.rebuild import Rebuild
    from store.redis_store import RedisStore

    journal = Journal(settings, name="spate-store-rebuild")
    store = RedisStore(store_url, settings.store_ttl_s, pool_size=settings.store_pool_size,
                       pool_wait_s=settings.store_pool_wait_s)
    journal.start()
    try:
        try:
            await asyncio.wait_for(journal.wait_connected(), connect_wait_s)
        except asyncio.TimeoutError:
            raise JournalUnavailable(
                f"cannot reach NATS at {where(settings.nats_url)} within {connect_wait_s:g} s"
            ) from None
        return await Rebuild(journal, store).run()
    finally:
        await store.close()
        await journal.close()
