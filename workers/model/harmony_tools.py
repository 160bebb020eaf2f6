"""Tool namespaces as harmony writes them into a system or developer message: a `# Tools`
section, each namespace a TypeScript-like `namespace NAME { type f = (_: {...}) => any; }`
block converted from the tools' JSON schemas, line for line as openai-harmony converts them
(comments for titles, descriptions, examples and defaults; `?` for optional properties;
`oneOf` as a union, one variant per line; enums as string literal unions)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class HarmonyTool:
    name: str
    description: str = ""
    # JSON schema of the arguments; None: a function without arguments (`() => any`).
    parameters: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ToolNamespace:
    name: str
    description: str | None = None
    tools: tuple[HarmonyTool, ...] = field(default_factory=tuple)


def lines(text: str) -> list[str]:
    """The lines of `text` as Rust's `str::lines` gives them: split at newlines only, a
    trailing carriage return dropped, no empty last line after a final newline."""
    parts = text.split("\n")
    if parts and parts[-1] == "":
        parts.pop()
    return [part.removesuffix("\r") for part in parts]


def tools_section(namespaces: Sequence[ToolNamespace]) -> str:
    """`# Tools` and each namespace, in name order (harmony keeps them in a sorted map)."""
    sections = ["# Tools"]
    for namespace in sorted(namespaces, key=lambda each: each.name):
        parts = [f"## {namespace.name}\n"]
        for line in lines(namespace.description or ""):
            parts.append(f"// {line}" if namespace.tools else line)
        if namespace.tools:
            parts.append(f"namespace {namespace.name} {{\n")
            for tool in namespace.tools:
                parts.extend(f"// {line}" for line in lines(tool.description))
                if tool.parameters is not None:
                    parts.append(f"type {tool.name} = (_: {typescript(tool.parameters, '')}) => any;\n")
                else:
                    parts.append(f"type {tool.name} = () => any;\n")
            parts.append(f"}} // namespace {namespace.name}")
        sections.append("\n".join(parts))
    return "\n\n".join(sections)


def _json(value: Any) -> str:
    # serde_json's Display: compact, non-ASCII kept.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _is_enum(schema: Any) -> bool:
    values = schema.get("enum") if isinstance(schema, dict) else None
    return isinstance(values, list) and bool(values)


def _default_comment(schema: dict[str, Any], enum_as_json: bool = False) -> str | None:
    """`default: ...`: a string in quotes unless the schema is an enum, where it is bare (or,
    for a variant of a top-level `oneOf`, written as JSON)."""
    if "default" not in schema:
        return None
    default = schema["default"]
    if isinstance(default, str) and not _is_enum(schema):
        return f'default: "{default}"'
    if isinstance(default, str) and not enum_as_json:
        return f"default: {default}"
    return f"default: {_json(default)}"


def _nullable(schema: Any, rendered: str) -> str:
    if isinstance(schema, dict) and schema.get("nullable") is True and "null" not in rendered:
        return f"{rendered} | null"
    return rendered


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def typescript(schema: Any, indent: str) -> str:
    """A JSON schema as a TypeScript type, indented by `indent` where it spans lines."""
    if not isinstance(schema, dict):
        return "any"
    one_of = schema.get("oneOf")
    if isinstance(one_of, list):
        out = ""
        for variant in one_of:
            out += f"\n{indent} | "
            out += _nullable(variant, typescript(variant, f"{indent}   "))
            comments = []
            if isinstance(variant, dict):
                if (description := _string(variant.get("description"))) is not None:
                    comments.append(description)
                if (default := _default_comment(variant, enum_as_json=True)) is not None:
                    comments.append(default)
            if comments:
                out += f" // {' '.join(comments)}"
        return out
    kind = schema.get("type")
    if isinstance(kind, list):
        names = ["number" if each == "integer" else each for each in kind if isinstance(each, str)]
        if names:
            return " | ".join(names)
    if not isinstance(kind, str):
        return "any"
    if kind == "object":
        return _object(schema, indent)
    if kind == "string":
        values = schema.get("enum")
        literals = [f'"{value}"' for value in values if isinstance(value, str)] if isinstance(
            values, list) else []
        return " | ".join(literals) if literals else "string"
    if kind in ("number", "integer"):
        return "number"
    if kind == "boolean":
        return "boolean"
    if kind == "array":
        return f"{typescript(schema['items'], indent)}[]" if "items" in schema else "Array<any>"
    return "any"


def _object(schema: dict[str, Any], indent: str) -> str:
    out = ""
    if (description := _string(schema.get("description"))) is not None:
        out += f"{indent}// {description}\n"
    out += "{\n"
    properties = schema.get("properties")
    if isinstance(properties, dict):
        required_list = schema.get("required")
        required = {name for name in required_list if isinstance(name, str)} if isinstance(
            required_list, list) else set()
        for key, value in properties.items():
            out += _property(key, value, key in required, indent)
    return out + f"{indent}}}"


def _property(key: str, value: Any, required: bool, indent: str) -> str:
    out = ""
    spec = value if isinstance(value, dict) else {}
    if (title := _string(spec.get("title"))) is not None:
        out += f"{indent}// {title}\n{indent}//\n"
    one_of = spec.get("oneOf")
    description = _string(spec.get("description"))
    if one_of is None and description is not None:
        out += f"{indent}// {description}\n"
    examples = spec.get("examples")
    if isinstance(examples, list) and examples:
        out += f"{indent}// Examples:\n"
        out += "".join(f'{indent}// - "{example}"\n' for example in examples if isinstance(example, str))
    optional = "" if required else "?"
    if isinstance(one_of, list):
        return out + _one_of_property(key, spec, one_of, description, optional, indent)
    out += f"{indent}{key}{optional}: "
    out += _nullable(spec, typescript(value, f"{indent}    ")) + ","
    if one_of is None and (default := _default_comment(spec)) is not None:
        out += f" // {default}"
    return out + "\n"


def _one_of_property(
    key: str, spec: dict[str, Any], variants: list[Any], description: str | None, optional: str,
    indent: str,
) -> str:
    out = ""
    first = variants[0] if variants and isinstance(variants[0], dict) else {}
    # A property description that repeats its first variant's is written once.
    above = description is not None and _string(first.get("description")) != description
    if above:
        out += f"{indent}// {description}\n"
    if (default := _default_comment(spec)) is not None:
        out += f"{indent}// {default}\n"
    out += f"{indent}{key}{optional}:\n"
    for index, variant in enumerate(variants):
        out += f"{indent} | " + _nullable(variant, typescript(variant, f"{indent}   "))
        comments = []
        variant_spec = variant if isinstance(variant, dict) else {}
        variant_description = _string(variant_spec.get("description"))
        if not (index == 0 and above) and variant_description is not None and (
                variant_description != description):
            comments.append(variant_description)
        if (variant_default := _default_comment(variant_spec)) is not None:
            comments.append(variant_default)
        if comments:
            out += f" // {' '.join(comments)}"
        out += "\n"
    return out + f"{indent},\n"
