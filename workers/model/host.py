"""What this machine offers the worker: usable cores and free memory. No torch here, so
`spate serve` can size its worker without loading it."""

from __future__ import annotations

import os


def usable_cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # platforms without affinity masks
        return os.cpu_count() or 1


def available_host_memory() -> int:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


# Pause instructions torch's OpenMP threads spin for the next parallel region before they
# sleep. libgomp's default (300,000: milliseconds) kept them spinning through the fused
# ops' own threads' work on the same cores (ChunkPool in kernels/cpu/chunk_pool.h); this many
# still carries them across the short gaps between torch's own ops.
OPENMP_SPIN_COUNT = 10_000


def shorten_openmp_spin() -> None:
    """Sets GOMP_SPINCOUNT (unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set already).
    libgomp reads it once, when torch loads it: call before anything imports torch."""
    if "OMP_WAIT_POLICY" not in os.environ:
        os.environ.setdefault("GOMP_SPINCOUNT", str(OPENMP_SPIN_COUNT))
