"""The client-run built-in tools whose schema OpenAI fixes (`local_shell`, `shell`,
`apply_patch`): the JSON schema the model's call is held to, and the output item its
arguments become. One definition: the API offers these schemas, the fold builds the items."""

from __future__ import annotations

import json
from typing import Any, Literal

BuiltinKind = Literal["local_shell", "shell", "apply_patch"]
BUILTIN_KINDS: tuple[BuiltinKind, ...] = ("local_shell", "shell", "apply_patch")

_COMMAND = {"type": "array", "items": {"type": "string"}, "minItems": 1}

BUILTIN_SCHEMAS: dict[BuiltinKind, dict[str, Any]] = {
    "local_shell": {
        "type": "object",
        "properties": {
            "command": {**_COMMAND, "description": "The command and its arguments."},
            "working_directory": {"type": "string"},
            "timeout_ms": {"type": "integer", "minimum": 1},
        },
        "required": ["command"],
        "additionalProperties": False,
    },
    "shell": {
        "type": "object",
        "properties": {
            "commands": {**_COMMAND, "description": "Shell commands, run one after another."},
            "timeout_ms": {"type": "integer", "minimum": 1},
        },
        "required": ["commands"],
        "additionalProperties": False,
    },
    "apply_patch": {
        "type": "object",
        "properties": {
            "type": {"enum": ["create_file", "update_file", "delete_file"]},
            "path": {"type": "string"},
            "diff": {"type": "string", "description": "A V4A diff (not for delete_file)."},
        },
        "required": ["type", "path"],
        "additionalProperties": False,
    },
}

BUILTIN_DESCRIPTIONS: dict[BuiltinKind, str] = {
    "local_shell": "Run a command on the user's machine.",
    "shell": "Run shell commands on the user's machine.",
    "apply_patch": "Create, update or delete a file in the user's workspace.",
}

ITEM_TYPES: dict[BuiltinKind, str] = {
    "local_shell": "local_shell_call", "shell": "shell_call", "apply_patch": "apply_patch_call",
}


def builtin_item(
    kind: BuiltinKind, item_id: str, call_id: str, arguments: str, status: str
) -> dict[str, Any]:
    """The output item of a built-in call. Its arguments were held to the schema above, so
    only a call cut short (max_output_tokens) can fail to parse: it keeps what it has."""
    try:
        values = json.loads(arguments) if arguments else {}
    except json.JSONDecodeError:
        values = {}
    item: dict[str, Any] = {"id": item_id, "type": ITEM_TYPES[kind], "call_id": call_id}
    if kind == "local_shell":
        item["action"] = {"type": "exec", "command": list(values.get("command", [])), "env": {},
                          "timeout_ms": values.get("timeout_ms"),
                          "working_directory": values.get("working_directory"), "user": None}
    elif kind == "shell":
        item["action"] = {"commands": list(values.get("commands", [])),
                          "timeout_ms": values.get("timeout_ms"), "max_output_length": None}
    else:
        operation = {"type": values.get("type", "update_file"), "path": values.get("path", "")}
        if operation["type"] != "delete_file":
            operation["diff"] = values.get("diff", "")
        item["operation"] = operation
        # apply_patch_call has no "incomplete" status: a cut patch stays in progress.
        status = "completed" if status == "completed" else "in_progress"
    item["status"] = status
    return item
