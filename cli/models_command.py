"""`spate models check PATH`: what a model file is and whether and how spate serves it,
from its metadata alone (workers/model_check.py), before anyone waits for a load."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

# A refusal is exit code 1 and one line; the report goes to stdout.
REFUSED = 1


def add_parser(commands: Any) -> None:
    models = commands.add_parser("models", help="inspect model files")
    actions = models.add_subparsers(dest="models_command", required=True)
    check = actions.add_parser(
        "check", help="the family, quantization, context length, template, reasoning format "
        "and kernel paths of a .gguf file or Hugging Face folder, read from its metadata")
    check.add_argument("path", help="a .gguf file or a Hugging Face model folder")


def run_models(args: argparse.Namespace) -> int:
    from workers.load_failure import reason_of
    from workers.model_check import check_model

    path = Path(args.path)
    try:
        report = check_model(path)
    except Exception as error:  # noqa: BLE001 - whatever the file holds, one line, no traceback
        print(f"spate: cannot serve {str(path)!r}: {reason_of(error)}", file=sys.stderr)
        return REFUSED
    print("\n".join(report.lines()))
    return 0
