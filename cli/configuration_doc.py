"""Write docs/configuration.md from the settings classes: every SPATE_* variable with its
default, the processes that read it and its meaning (the field's `description`).

    .venv/bin/python -m cli.configuration_doc

A field's `json_schema_extra` may say what the page shows besides:
`processes` (who reads it, when not everyone its class stands for), `shown_default`
(a default better said in words), `row` (the field whose row it shares: `port` shares
`host`'s) and `described_in` (the field whose meaning tells of it). A field of
CliSettings named like a field described elsewhere shares that field's row. A field with
none of these and no description is an error, so no setting goes undocumented.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from api.settings import ApiSettings
from cli.settings import CliSettings
from journal import JournalSettings
from workers.model.host import OPENMP_SPIN_COUNT
from workers.settings import WorkerSettings

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "configuration.md"
COMMAND = "python -m cli.configuration_doc"


@dataclass(frozen=True)
class Source:
    settings: type[BaseSettings]
    heading: str
    path: str
    processes: str  # who reads a field of this class, unless the field says


SOURCES = (
    Source(JournalSettings, "NATS, in every process", "journal/settings.py", "all"),
    Source(CliSettings, "The `spate` command and `spate serve`", "cli/settings.py", "serve"),
    Source(ApiSettings, "The API", "api/settings.py", "api"),
    Source(WorkerSettings, "The worker", "workers/settings.py", "worker"),
)


@dataclass
class Row:
    variables: list[str]
    defaults: list[str]
    processes: list[str]
    meaning: str
    processes_given: bool = False
    fields: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        names = ", ".join(f"`{name}`" for name in self.variables)
        defaults = self.defaults[0] if len(set(self.defaults)) == 1 else ", ".join(self.defaults)
        return f"| {names} | {defaults} | {', '.join(self.processes)} | {linked(self.meaning)} |"


def env_name(name: str) -> str:
    return f"SPATE_{name.upper()}"


def extra(info: FieldInfo) -> dict[str, str]:
    given = info.json_schema_extra
    if given is None:
        return {}
    if not isinstance(given, dict):
        raise TypeError("json_schema_extra of a setting is a dict")
    return {key: str(value) for key, value in given.items()}


def shown_default(name: str, info: FieldInfo) -> str:
    if "shown_default" in extra(info):
        return extra(info)["shown_default"]
    if info.default_factory is not None:
        raise ValueError(f"{env_name(name)}: a default made at run time needs a shown_default")
    value = info.default
    if value is None:
        return "unset"
    if value == "":
        return "empty"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def own_fields(source: Source) -> dict[str, FieldInfo]:
    """The fields a class defines itself, not those it inherits from JournalSettings."""
    fields = source.settings.model_fields
    if source.settings is JournalSettings or not issubclass(source.settings, JournalSettings):
        return dict(fields)
    return {name: info for name, info in fields.items() if name not in JournalSettings.model_fields}


def settings_rows() -> list[tuple[Source, list[Row]]]:
    """Each class's rows, in the order its fields are defined."""
    rows: dict[str, Row] = {}
    sections: list[tuple[Source, list[Row]]] = []
    later: list[tuple[Source, str, FieldInfo]] = []
    for source in SOURCES:
        section: list[Row] = []
        for name, info in own_fields(source).items():
            if info.description is None:
                later.append((source, name, info))
                continue
            if name in rows:
                raise ValueError(f"{env_name(name)} is described twice")
            given = extra(info).get("processes")
            rows[name] = Row([env_name(name)], [shown_default(name, info)],
                             [given or source.processes], info.description,
                             processes_given=given is not None, fields=[name])
            section.append(rows[name])
        sections.append((source, section))
    for source, name, info in later:
        joins = extra(info)
        if "described_in" in joins:
            described = rows[joins["described_in"]]
            if env_name(name) not in described.meaning:
                raise ValueError(f"{env_name(name)}: {described.variables[0]} does not tell of it")
        elif "row" in joins:
            row = rows[joins["row"]]
            row.variables.append(env_name(name))
            row.defaults.append(shown_default(name, info))
            row.fields.append(name)
        elif name in rows:  # a field shared by two classes: both processes read it
            row = rows[name]
            if not row.processes_given and "all" not in row.processes:
                row.processes.append(source.processes)
        else:
            raise ValueError(f"{env_name(name)} ({source.path}) has no description: give its "
                             "field one, or say in json_schema_extra which row tells of it")
    return sections


def compose_default(variable: str) -> str:
    """The default compose.yaml gives `${variable:-default}`."""
    found = re.search(rf"\$\{{{variable}:-([^}}]*)\}}", (ROOT / "compose.yaml").read_text())
    if found is None:
        raise LookupError(f"compose.yaml has no default for {variable}")
    return f"`{found.group(1)}`" if found.group(1) else "empty"


def dockerfile_default(argument: str) -> str:
    """The default of the Dockerfile's `ARG argument=default`."""
    found = re.search(rf"^ARG {argument}=(.*)$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    if found is None:
        raise LookupError(f"the Dockerfile has no ARG {argument}")
    value = found.group(1).strip().strip('"')
    return f"`{value}`" if value else "empty"


def outside_rows() -> list[Row]:
    """Variables read outside the settings classes: by libgomp, compose and the image build."""
    return [
        Row(["GOMP_SPINCOUNT"],
            [f"`{OPENMP_SPIN_COUNT}` in a worker (unless `OMP_WAIT_POLICY` is set)"], ["worker"],
            "how long torch's OpenMP threads spin for work before they sleep; shorter than "
            "libgomp's own default so they leave the cores to the fused CPU ops' threads "
            "(docs/internals.md; set in workers/model/host.py)"),
        Row(["SPATE_IMAGE"], [compose_default("SPATE_IMAGE")], ["compose"],
            "the project's image, for the API and the worker"),
        Row(["SPATE_BASE_IMAGE"], [compose_default("SPATE_BASE_IMAGE")], ["compose"],
            "the image the project's image is built on (the Dockerfile's `BASE_IMAGE`: "
            "Debian-like, Python 3.10+ with venv)"),
        Row(["SPATE_NATS_IMAGE", "SPATE_REDIS_IMAGE"],
            [compose_default("SPATE_NATS_IMAGE"), compose_default("SPATE_REDIS_IMAGE")],
            ["compose"], "the NATS and Redis images"),
        Row(["TORCH_SPEC", "WHEELS_URL"],
            [dockerfile_default("TORCH_SPEC"), dockerfile_default("WHEELS_URL")],
            ["image build"], "Dockerfile arguments: the torch requirement, and a folder of "
            "wheels (a URL) to install from instead of the package index"),
    ]


def linked(meaning: str) -> str:
    """`docs/x.md` in a meaning, as a link from this page (which sits in docs/)."""
    if "|" in re.sub(r"`[^`]*`", "", meaning):
        raise ValueError(f"a bare | would end a table cell: {meaning}")
    return re.sub(r"(?<![`/\w])docs/([a-z-]+\.md)", r"[docs/\1](\1)", meaning)


HEADER = f"""# Configuration

Every setting is an environment variable (`SPATE_` prefix) and, for the common ones, a
flag (`spate serve --help`, `spate api --help`, `spate worker --help`). An invalid value
stops the process with one line naming the variable.

This page is written from the settings classes (a field's `description` is its
meaning) by `{COMMAND}`; `tests/test_configuration_doc.py` fails when
the two disagree, and `tests/test_configuration_bounds.py` wants a test for every bound
listed here.
"""

TABLE_HEAD = "| variable | default | process | meaning |\n|---|---|---|---|\n"


def table(rows: list[Row]) -> str:
    return TABLE_HEAD + "".join(row.markdown() + "\n" for row in rows)


def render() -> str:
    parts = [HEADER]
    for source, rows in settings_rows():
        parts.append(f"\n## {source.heading}\n\nFrom [`{source.path}`](../{source.path}).\n\n{table(rows)}")
    parts.append("\n## Outside the settings\n\nRead by libgomp, `compose.yaml` and the "
                 f"`Dockerfile`.\n\n{table(outside_rows())}")
    return "".join(parts)


def main() -> None:
    PAGE.write_text(render())
    print(f"wrote {PAGE.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
