"""Where a run event's type is written as a bare string outside the catalogue (domain/events.py).

tests/unit/test_event_catalogue.py refuses every site these find, in Python (core, the shapes,
functions/, scripts/), in SQL held in Python strings, and in the web page's JavaScript. Each form
is one that was found in the code (the test names them):

- a comparison with a type read off an event (`etype`, `ev.type`, `e["type"]`, `x.get("event")`, a
  transcript tuple's `[1]`), or a `match` on one with string cases;
- a set, tuple, list or dict keyed by two or more event types (`frozenset({"done", "error"})`);
- an emitter given the type as a string (`NewEvent("tool_result", …)`, `sse_frame("session", …)`,
  `("channel_publish", {…})` for a tool's extra events, `return "steer", {…}`);
- an f-string that makes a type from pieces (`f"{kind}_delta"`);
- SQL: `type = 'text'`, `type IN ('user_input', …)`, a literal type beside its payload parameter;
- JavaScript: `type === "tool_call"`, `case "done":`, an array of types, an `EVENTS.X` the catalogue
  does not have.
Vendor wire formats (providers/) name their own block types and are not read.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from treadle.domain.events import EventType

NAMES = frozenset(e.value for e in EventType)
_NAME_ALT = "|".join(sorted(NAMES, key=len, reverse=True))
#: names that read an event's type: `etype == …`, `ev.type == …`, `e["event"] == …`
_TYPE_NAMES = frozenset({"etype", "event_type", "type", "event", "t"})
_EMITTERS = frozenset({"NewEvent", "sse_frame", "publish"})

_SQL = [
    re.compile(rf"\btype\s*(?:=|<>|!=)\s*'({_NAME_ALT})'", re.I),
    re.compile(rf"\btype\s+(?:NOT\s+)?IN\s*\([^)]*'({_NAME_ALT})'", re.I),
]
#: a literal type beside its payload (`(1, 'user_input', %(ui)s::jsonb)`) in a statement on `events`
_SQL_ROW = re.compile(rf"'({_NAME_ALT})'\s*,\s*(?:%[(s]|jsonb)")
_Q = r"""(["'`])"""
_JS = [
    re.compile(rf"\b(?:type|event|etype)\s*(?:===|!==|==|!=)\s*{_Q}({_NAME_ALT})\1"),
    re.compile(rf"{_Q}({_NAME_ALT})\1\s*(?:===|!==|==|!=)\s*[\w.]*\b(?:type|event|etype)\b"),
    re.compile(rf"\bcase\s+{_Q}({_NAME_ALT})\1\s*:"),
    re.compile(rf"\[\s*{_Q}(?:{_NAME_ALT})\1\s*(?:,\s*{_Q}(?:{_NAME_ALT})\2\s*)+,?\s*\]"),
]
_JS_MEMBER = re.compile(r"\bEVENTS\.([A-Z_]+)\b")


def _strings(node: ast.AST) -> set[str]:
    """The string constants `node` is or holds (a constant, a tuple/list/set of them, `frozenset({…})`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("frozenset", "set") \
            and node.args:
        return _strings(node.args[0])
    return set()


def _all_names(node: ast.AST) -> bool:
    """`node` is a collection of two or more strings, every one an event type."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        values = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
        return len(values) >= 2 and all(isinstance(v, str) and v in NAMES for v in values)
    if isinstance(node, ast.Dict):
        keys = [k.value if isinstance(k, ast.Constant) else None for k in node.keys]
        return len(keys) >= 2 and all(isinstance(k, str) and k in NAMES for k in keys)
    return False


def _reads_type(node: ast.AST) -> bool:
    """`node` reads an event's type: `etype`, `ev.type`, `ev.event`, `e["type"]`, `x.get("type")`, `row[1]`."""
    if isinstance(node, ast.Name):
        return node.id in _TYPE_NAMES
    if isinstance(node, ast.Attribute):
        return node.attr in _TYPE_NAMES
    if isinstance(node, ast.Subscript):
        key = node.slice
        return isinstance(key, ast.Constant) and key.value in (1, "type", "event")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value in ("type", "event")
    return False


def _made(node: ast.JoinedStr) -> bool:
    """An f-string whose pieces make an event type: `f"{kind}_delta"`."""
    pattern, literal = "", ""
    for part in node.values:
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            pattern += re.escape(part.value)
            literal += part.value
        else:
            pattern += "[a-z_]+"
    return len(literal) >= 3 and "_" in literal and pattern != re.escape(literal) \
        and any(re.fullmatch(pattern, n) for n in NAMES)


def _in_sql(text: str) -> bool:
    return any(r.search(text) for r in _SQL) or bool(re.search(r"\bevents\b", text) and _SQL_ROW.search(text))


def _emits(node: ast.AST) -> bool:
    """An emitter given a type as a string: `NewEvent("x", …)`, `sse_frame("x", …)`, `("x", {…})`,
    and `….events.append(("x", …))` with any string (a type the catalogue does not have as well)."""
    if isinstance(node, ast.Call) and _callee(node) == "NewEvent":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
    if isinstance(node, ast.Call) and _callee(node) in _EMITTERS:
        return any(isinstance(a, ast.Constant) and a.value in NAMES for a in node.args[:2])
    if isinstance(node, ast.Call) and _callee(node) in ("append", "extend") and isinstance(node.func, ast.Attribute) \
            and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "events" and node.args:
        items = node.args[0].elts if isinstance(node.args[0], (ast.List, ast.Tuple)) and _callee(node) == "extend" \
            else [node.args[0]]
        return any(isinstance(i, ast.Tuple) and i.elts and isinstance(i.elts[0], ast.Constant)
                   and isinstance(i.elts[0].value, str) for i in items)
    return isinstance(node, ast.Tuple) and len(node.elts) == 2 and isinstance(node.elts[0], ast.Constant) \
        and node.elts[0].value in NAMES and isinstance(node.elts[1], (ast.Dict, ast.DictComp, ast.Call))


def _callee(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _python_hits(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_reads_type(s) for s in sides) and any(_strings(s) & NAMES for s in sides):
                yield node.lineno, "compared"
        elif isinstance(node, ast.Match) and _reads_type(node.subject):
            for case in node.cases:
                for p in ast.walk(case.pattern):
                    if isinstance(p, ast.MatchValue) and _strings(p.value) & NAMES:
                        yield p.lineno, "matched"
        elif _emits(node):
            yield getattr(node, "lineno", 0), "emitted"
        elif isinstance(node, ast.JoinedStr) and _made(node):
            yield node.lineno, "made"
        if _all_names(node) or (isinstance(node, ast.Call) and _callee(node) in ("frozenset", "set")
                                and node.args and _all_names(node.args[0])):
            yield getattr(node, "lineno", 0), "collected"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _in_sql(node.value):
            yield node.lineno, "in SQL"


def python_sites(source: str) -> list[tuple[int, str]]:
    """(line, form) of each bare event type in a Python module's text."""
    return sorted(set(_python_hits(ast.parse(source))))


def js_sites(source: str) -> list[tuple[int, str]]:
    """(line, form) of each bare event type in a script's text, and each `EVENTS.X` not in the catalogue."""
    members = {e.name for e in EventType}
    found: list[tuple[int, str]] = []
    for n, line in enumerate(source.splitlines(), 1):
        if any(r.search(line) for r in _JS):
            found.append((n, "compared"))
        found.extend((n, f"EVENTS.{m} is not in the catalogue") for m in _JS_MEMBER.findall(line) if m not in members)
    return found


def scan(root: Path) -> list[str]:
    """Every site outside the catalogue, as `path:line: form: text`."""
    out: list[str] = []
    files = [p for d in ("core", "sidecar", "cloud", "functions", "scripts", "infra", "layers")
             for p in sorted((root / d).rglob("*")) if p.suffix in (".py", ".js", ".mjs", ".html")]
    for path in files:
        rel = path.relative_to(root)
        if rel.as_posix() == "core/treadle/domain/events.py" or "providers" in rel.parts \
                or "node_modules" in rel.parts or "cdk.out" in rel.parts:
            continue
        text = path.read_text()
        sites = python_sites(text) if path.suffix == ".py" else js_sites(text)
        lines = text.splitlines()
        out.extend(f"{rel}:{n}: {form}: {lines[n - 1].strip()[:120]}" for n, form in sites)
    return out
