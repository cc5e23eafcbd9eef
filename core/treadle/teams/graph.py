"""A TeamDef's definition: the workflow graph (states, transitions, handlers), its validation and
the pure walk helpers — loomcycle's internal/teamgraph (graph.go, validate.go, walk.go), field for
field.

    {"entry": "write", "max_iterations": 3,
     "states": [{"state": "write", "handler": {"kind": "agent", "agent": "writer"}},
                {"state": "review", "handler": {"kind": "parallel", "agents": ["r1", "r2"],
                                                "consolidator": "editor", "wait": "all"}},
                {"state": "done", "handler": {"kind": "terminal"}}],
     "transitions": [{"from": "write", "to": "review", "on": "success"},
                     {"from": "review", "to": "write", "on": "pushback:rework"},
                     {"from": "review", "to": "done", "on": "success"}],
     "colors": {"states": {"write": "blue"}, "transitions": {"pushback": "red"}}}

Handlers: `agent` (one agent; an optional `consolidator` re-evaluates its output), `parallel`
(`agents` fanned out, `wait` all | any | at_least:N, a required `consolidator` picks the edge),
`consolidator` (an agent that picks the edge), `terminal` (the end). Edges: `success`,
`pushback:<reason>`, `conditional:<expr>`; a consolidator names its edge on a `signal: <edge>`
line. Every state is capped at `max_iterations` entries per run (0 = 10, at most 1000), so every
cycle is bounded. Unlike loomcycle, unknown keys are refused by name, never ignored.

Every refusal is a `TeamGraphRefused` (HTTP 422, code `tool_refused` as loomcycle's clients
expect) whose `reason` names its class (`INVALID_CODES`), raised before anything is stored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from treadle.errors import DefRefused

DEFAULT_MAX_ITERATIONS = 10
MAX_ALLOWED_ITERATIONS = 1000
HANDLER_KINDS = ("agent", "parallel", "consolidator", "terminal")
HANDLER_KEYS = ("kind", "agent", "agents", "wait", "consolidator", "input_template", "timeout_ms")

#: one code per class of invalid graph
INVALID_CODES = {
    "team_invalid_definition": "the definition is not the graph's shape (types, unknown keys)",
    "team_entry_missing": "no `entry`, or it names no state",
    "team_no_states": "no state at all",
    "team_duplicate_state": "two states with one id, or an empty id",
    "team_invalid_handler": "a handler of an unknown kind or without the fields its kind needs",
    "team_parallel_without_consolidator": "a parallel handler without a consolidator",
    "team_dangling_transition": "a transition from or to a state that does not exist",
    "team_invalid_edge": "an `on` that is not success | pushback:<reason> | conditional:<expr>",
    "team_ambiguous_transition": "two transitions from one state with the same `on`",
    "team_terminal_has_transitions": "a transition out of a terminal state",
    "team_unreachable_state": "a state the entry cannot reach",
    "team_dead_end": "a non-terminal state without an outgoing transition",
    "team_cap_out_of_range": "max_iterations below 0 or above 1000 (every cycle is capped: 0 means 10)",
}


class TeamGraphRefused(DefRefused):
    """An invalid graph: code `tool_refused` (what loomcycle's clients branch on), with the
    class of the refusal as `reason` (INVALID_CODES) in the error body."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"invalid TeamDef: {message}")
        self.reason = reason
        self.body_extra = {"reason": reason, "tool": "TeamDef"}


def _refuse(code: str, message: str) -> DefRefused:
    return TeamGraphRefused(code, message)


@dataclass(frozen=True, slots=True)
class Handler:
    kind: str
    agent: str = ""
    agents: tuple[str, ...] = ()
    wait: str = ""
    consolidator: str = ""
    input_template: str = ""
    timeout_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        """Go's encoding of the Handler struct: every field but `kind` omitted when empty."""
        out: dict[str, Any] = {"kind": self.kind}
        for key in HANDLER_KEYS[1:]:
            v = getattr(self, key)
            if v:
                out[key] = list(v) if key == "agents" else v
        return out


@dataclass(frozen=True, slots=True)
class State:
    id: str
    handler: Handler


@dataclass(frozen=True, slots=True)
class Transition:
    source: str
    target: str
    on: str


@dataclass(frozen=True, slots=True)
class Definition:
    entry: str
    states: tuple[State, ...]
    #: None when the definition gives no `transitions` (loomcycle hashes that as null)
    transitions: tuple[Transition, ...] | None
    max_iterations: int = 0
    colors: dict[str, dict[str, str]] | None = field(default=None)

    def to_json(self) -> dict[str, Any]:
        """The stored body: loomcycle's json.Marshal of a Definition."""
        out: dict[str, Any] = {"entry": self.entry}
        if self.max_iterations:
            out["max_iterations"] = self.max_iterations
        out["states"] = [{"state": s.id, "handler": s.handler.to_json()} for s in self.states]
        out["transitions"] = (None if self.transitions is None else
                              [{"from": t.source, "to": t.target, "on": t.on} for t in self.transitions])
        if self.colors:
            out["colors"] = self.colors
        return out

    def state(self, state_id: str) -> State | None:
        return next((s for s in self.states if s.id == state_id), None)

    def next_state(self, source: str, on: str) -> str | None:
        return next((t.target for t in self.transitions or () if t.source == source and t.on == on), None)

    @property
    def cap(self) -> int:
        """The per-state cycle cap in force."""
        return self.max_iterations or DEFAULT_MAX_ITERATIONS


# -- parsing -------------------------------------------------------------------------------------


def _bad(message: str) -> DefRefused:
    return _refuse("team_invalid_definition", message)


def _str(obj: dict[str, Any], key: str, where: str) -> str:
    v = obj.get(key)
    if v is None:
        return ""
    if not isinstance(v, str):
        raise _bad(f"{where}.{key} must be a string")
    return v


def _int(obj: dict[str, Any], key: str, where: str) -> int:
    v = obj.get(key)
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad(f"{where}.{key} must be an integer")
    return v


def _keys(obj: Any, allowed: tuple[str, ...], where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise _bad(f"{where} must be an object")
    unknown = sorted(set(obj) - set(allowed))
    if unknown:
        raise _bad(f"{where}: unknown field(s) {', '.join(unknown)} (fields: {', '.join(allowed)})")
    return obj


def _list(obj: dict[str, Any], key: str, where: str) -> list[Any] | None:
    v = obj.get(key)
    if v is None:
        return None
    if not isinstance(v, list):
        raise _bad(f"{where}.{key} must be a list")
    return v


def parse(body: Any) -> Definition:
    """The Definition of a body (shape only; `validate` checks the graph)."""
    d = _keys(body, ("entry", "max_iterations", "states", "transitions", "colors"), "definition")
    states = []
    for i, raw in enumerate(_list(d, "states", "definition") or []):
        where = f"states[{i}]"
        s = _keys(raw, ("state", "handler"), where)
        h = _keys(s.get("handler") or {}, HANDLER_KEYS, f"{where}.handler")
        agents = _list(h, "agents", f"{where}.handler") or []
        if not all(isinstance(a, str) for a in agents):
            raise _bad(f"{where}.handler.agents must be a list of agent names")
        hw = f"{where}.handler"
        states.append(State(_str(s, "state", where), Handler(
            kind=_str(h, "kind", hw), agent=_str(h, "agent", hw), agents=tuple(agents), wait=_str(h, "wait", hw),
            consolidator=_str(h, "consolidator", hw), input_template=_str(h, "input_template", hw),
            timeout_ms=_int(h, "timeout_ms", hw))))
    raw_transitions = _list(d, "transitions", "definition")
    transitions = None
    if raw_transitions is not None:
        transitions = []
        for i, raw in enumerate(raw_transitions):
            where = f"transitions[{i}]"
            t = _keys(raw, ("from", "to", "on"), where)
            transitions.append(Transition(_str(t, "from", where), _str(t, "to", where), _str(t, "on", where)))
    return Definition(entry=_str(d, "entry", "definition"), states=tuple(states),
                      transitions=None if transitions is None else tuple(transitions),
                      max_iterations=_int(d, "max_iterations", "definition"), colors=_colors(d.get("colors")))


def _colors(raw: Any) -> dict[str, dict[str, str]] | None:
    if raw is None:
        return None
    c = _keys(raw, ("states", "transitions"), "colors")
    out: dict[str, dict[str, str]] = {}
    for key in ("states", "transitions"):
        m = c.get(key)
        if m is None:
            continue
        if not isinstance(m, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in m.items()):
            raise _bad(f"colors.{key} must map names to colour strings")
        if m:
            out[key] = dict(m)
    return out or None


# -- validation ----------------------------------------------------------------------------------

_AT_LEAST = re.compile(r"^at_least:(.*)$")


def validate(d: Definition) -> None:
    """loomcycle's teamgraph.Validate, each class of refusal with its own code."""
    if not d.entry.strip():
        raise _refuse("team_entry_missing", "`entry` is required")
    if not d.states:
        raise _refuse("team_no_states", "at least one state is required")
    if d.max_iterations < 0 or d.max_iterations > MAX_ALLOWED_ITERATIONS:
        raise _refuse("team_cap_out_of_range", f"max_iterations {d.max_iterations} must be 0 (= the default "
                      f"{DEFAULT_MAX_ITERATIONS}) to {MAX_ALLOWED_ITERATIONS}")
    states: dict[str, State] = {}
    for i, s in enumerate(d.states):
        if not s.id.strip():
            raise _refuse("team_duplicate_state", f"state[{i}] has an empty `state` id")
        if s.id in states:
            raise _refuse("team_duplicate_state", f"duplicate state id {s.id!r}")
        _validate_handler(s.id, s.handler)
        states[s.id] = s
    if d.entry not in states:
        raise _refuse("team_entry_missing", f"entry {d.entry!r} does not resolve to a state")
    outbound: dict[str, set[str]] = {}
    adjacent: dict[str, list[str]] = {}
    for i, t in enumerate(d.transitions or ()):
        if t.source not in states:
            raise _refuse("team_dangling_transition", f"transition[{i}] from {t.source!r} does not resolve to a state")
        if t.target not in states:
            raise _refuse("team_dangling_transition", f"transition[{i}] to {t.target!r} does not resolve to a state")
        _validate_on(i, t.on)
        if states[t.source].handler.kind == "terminal":
            raise _refuse("team_terminal_has_transitions",
                          f"terminal state {t.source!r} must have no outbound transitions")
        labels = outbound.setdefault(t.source, set())
        if t.on in labels:
            raise _refuse("team_ambiguous_transition",
                          f"state {t.source!r} has duplicate outbound transition label {t.on!r} (ambiguous route)")
        labels.add(t.on)
        adjacent.setdefault(t.source, []).append(t.target)
    seen, queue = {d.entry}, [d.entry]
    while queue:
        for nxt in adjacent.get(queue.pop(0), []):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    for s in d.states:
        if s.id not in seen:
            raise _refuse("team_unreachable_state", f"state {s.id!r} is unreachable from entry {d.entry!r}")
    for s in d.states:
        if s.handler.kind != "terminal" and not outbound.get(s.id):
            raise _refuse("team_dead_end", f"non-terminal state {s.id!r} has no outbound transition (dead end)")


def _validate_handler(state: str, h: Handler) -> None:
    if h.kind in ("agent", "consolidator"):
        if not h.agent.strip():
            raise _refuse("team_invalid_handler", f"state {state!r} handler kind {h.kind!r} requires `agent`")
        if h.agents:
            raise _refuse("team_invalid_handler",
                          f"state {state!r} handler kind {h.kind!r} must not set `agents` (use `agent`)")
    elif h.kind == "parallel":
        if not h.agents:
            raise _refuse("team_invalid_handler", f"state {state!r} parallel handler requires a non-empty `agents`")
        if any(not a.strip() for a in h.agents):
            raise _refuse("team_invalid_handler", f"state {state!r} parallel handler has an empty agent name")
        if not h.consolidator.strip():
            raise _refuse("team_parallel_without_consolidator",
                          f"state {state!r} parallel handler requires a `consolidator` agent")
        _validate_wait(state, h.wait)
    elif h.kind == "terminal":
        if h.agent or h.agents or h.consolidator:
            raise _refuse("team_invalid_handler",
                          f"state {state!r} terminal handler must not set agent/agents/consolidator")
    elif not h.kind:
        raise _refuse("team_invalid_handler", f"state {state!r} handler is missing a `kind`")
    else:
        raise _refuse("team_invalid_handler", f"state {state!r} has unknown handler kind {h.kind!r} "
                      "(want agent|parallel|consolidator|terminal)")
    if h.timeout_ms < 0:
        raise _refuse("team_invalid_handler", f"state {state!r} handler timeout_ms must be >= 0")


def _validate_wait(state: str, wait: str) -> None:
    if wait in ("", "all", "any"):
        return
    m = _AT_LEAST.match(wait)
    if m is not None:
        n = m.group(1)
        if not n.lstrip("+-").isdigit() or int(n) < 1:
            raise _refuse("team_invalid_handler", f"state {state!r} wait {wait!r}: at_least:<N> needs a positive "
                          "integer")
        return
    raise _refuse("team_invalid_handler", f"state {state!r} has invalid wait {wait!r} (want all|any|at_least:<N>)")


def _validate_on(i: int, on: str) -> None:
    if on == "success":
        return
    for prefix, what in (("pushback:", "reason"), ("conditional:", "expression")):
        if on.startswith(prefix):
            if not on[len(prefix):].strip():
                raise _refuse("team_invalid_edge", f"transition[{i}] {prefix} needs a non-empty {what}")
            return
    raise _refuse("team_invalid_edge", f"transition[{i}] has invalid `on` {on!r} (want success | "
                  "pushback:<reason> | conditional:<expr>)")


def required_successes(wait: str, n: int) -> int:
    """How many of a parallel state's `n` agents must succeed."""
    if wait in ("", "all"):
        return n
    if wait == "any":
        return 1
    return min(int(wait.split(":", 1)[1]), n)
