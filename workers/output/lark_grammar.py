"""A custom tool's Lark grammar as xgrammar EBNF, so its input is held by the same
constrained decoding as everything else.

Lark itself reads the grammar (its syntax, `%import common.*`, `?rule`/`_rule`, `->`
aliases, `~`, templates), flattens it into plain rules and terminals, and gives each
terminal as a string or a regex; strings become EBNF literals and regexes go through
xgrammar's own regex converter. `%ignore`d terminals may appear between any two symbols,
as Lark's lexer lets them. Terminal flags (`"x"i`, `/x/s`) have no EBNF form: refused."""

from __future__ import annotations

import json

from lark.exceptions import LarkError
from lark.load_grammar import load_grammar
from xgrammar.testing import _regex_to_ebnf

from workers.engine.grammar import GrammarError

_IGNORED = "lark_ignored"


def lark_to_ebnf(definition: str) -> str:
    try:
        grammar, _ = load_grammar(definition, "<custom tool>", [], False)  # type: ignore[no-untyped-call]
        terminals, rules, ignored = grammar.compile(["start"], set())
    except LarkError as error:
        raise GrammarError(f"the Lark grammar does not load: {error}") from error
    lines = [f"root ::= {_padded('start', ignored)}"]
    expansions: dict[str, list[str]] = {}
    for rule in rules:
        symbols = [_name(symbol.name) for symbol in rule.expansion]
        expansions.setdefault(_name(rule.origin.name), []).append(
            _joined(symbols, ignored) if symbols else '""')
    lines += [f"{name} ::= {' | '.join(alternatives)}" for name, alternatives in expansions.items()]
    for terminal in terminals:
        pattern = terminal.pattern
        if pattern.flags:
            raise GrammarError(f"terminal {terminal.name} has flags {sorted(pattern.flags)}, "
                               "which the grammar cannot hold")
        if pattern.type == "str":
            body = json.dumps(pattern.value, ensure_ascii=False)
        else:
            body = f"({_regex_to_ebnf(_dot_without_newline(pattern.value), with_rule_name=False).strip()})"
        lines.append(f"{_name(terminal.name)} ::= {body}")
    if ignored:
        lines.append(f"{_IGNORED} ::= ({' | '.join(_name(name) for name in ignored)})*")
    return "\n".join(lines) + "\n"


def _name(lark_name: str) -> str:
    # EBNF rule names may not start with an underscore; Lark's internal ones do.
    return f"lark{lark_name}" if lark_name.startswith("_") else lark_name


def _joined(symbols: list[str], ignored: list[str]) -> str:
    return f" {_IGNORED} ".join(symbols) if ignored else " ".join(symbols)


def _padded(symbol: str, ignored: list[str]) -> str:
    return f"{_IGNORED} {symbol} {_IGNORED}" if ignored else symbol


def _dot_without_newline(regex: str) -> str:
    """`.` in a Lark (Python) regex stops at a newline; xgrammar's converter would let it
    match one, so it is spelled out as a class."""
    out: list[str] = []
    escaped = in_class = False
    for char in regex:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == ".":
            out.append("[^\\n]")
            continue
        out.append(char)
    return "".join(out)
