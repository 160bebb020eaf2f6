"""A worker process over the SYNTHETIC token source (benchmarks only)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.synthetic_engine import SyntheticServedModel  # noqa: E402
from workers.settings import WorkerSettings  # noqa: E402
from workers.worker import Worker  # noqa: E402


async def main() -> None:
    step_interval = float(os.environ.get("SPATE_BENCH_STEP_INTERVAL_S", "0.01"))
    max_num_seqs = int(os.environ.get("SPATE_BENCH_MAX_NUM_SEQS", "256"))
    settings = WorkerSettings(max_num_seqs=max_num_seqs)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await Worker(settings, lambda s: SyntheticServedModel(step_interval, s.worker_id)).run(stop)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main())
