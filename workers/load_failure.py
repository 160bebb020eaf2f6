"""A model the worker cannot load: the one line that says why, the name the model would
have been served under, and the exit code that tells whoever started the worker that
starting it again cannot help."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from events import ModelLoadFailure
from workers.settings import WorkerSettings

log = logging.getLogger("spate.worker")

# sysexits' "configuration error": the worker's settings name a model it cannot serve (an
# unsupported architecture, tokenizer or quantization, a missing file, too little
# memory), which a restart with the same settings meets again. `spate serve` stops on it.
EXIT_CODE = os.EX_CONFIG  # 78
# Longest reason kept: a message that quotes a whole file's worth stays readable.
REASON_CHARS = 600


class ModelLoadFailed(Exception):
    """The worker stops: its model could not be loaded (`failure` says why)."""

    def __init__(self, failure: ModelLoadFailure) -> None:
        super().__init__(f"cannot load model {failure.source!r}: {failure.reason}")
        self.failure = failure


def served_name(settings: WorkerSettings) -> str:
    """The name the model would be served under, known without loading it: as the
    loaders name a checkpoint (a .gguf file's stem, a folder's name, a served name as it
    is), unless the settings give one."""
    if settings.served_model_name:
        return settings.served_model_name
    path = Path(settings.model)
    return path.stem if path.suffix == ".gguf" else path.name or settings.model


def reason_of(error: BaseException) -> str:
    """`error` as one line: the loaders' refusals already name what is wrong and what is
    supported; anything else keeps its type, which then says more than its message."""
    if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError":
        text = f"out of memory: {error}" if str(error) else "out of memory"
    elif isinstance(error, (ValueError, OSError)):
        text = str(error) or type(error).__name__
    else:
        text = f"{type(error).__name__}: {error}"
    line = " ".join(text.split())
    return line if len(line) <= REASON_CHARS else line[: REASON_CHARS - 3] + "..."


def load_failure(settings: WorkerSettings, error: BaseException) -> ModelLoadFailure:
    """What the worker publishes about `error`, and logs as one line (its traceback only
    at debug level: a refused file is no bug of the worker's)."""
    failure = ModelLoadFailure(
        name=served_name(settings), source=settings.model, reason=reason_of(error),
        worker_id=settings.worker_id, failed_at=time.time(),
    )
    log.error("cannot load model %r (served as %r): %s", failure.source, failure.name,
              failure.reason)
    log.debug("the load failed with", exc_info=error)
    return failure


def write_failure_file(settings: WorkerSettings, failure: ModelLoadFailure) -> None:
    """The one line for the process that started the worker (`spate serve`'s supervisor
    prints it as it stops), where the settings name a file for it."""
    if settings.failure_file is None:
        return
    try:
        Path(settings.failure_file).write_text(
            f"cannot load model {failure.source!r}: {failure.reason}\n"
        )
    except OSError as error:
        log.warning("could not write %s: %s", settings.failure_file, error)
