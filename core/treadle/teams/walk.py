"""The walk of a team run as a pure function of what its tool calls returned so far.

A team run is an ordinary run whose "model" is this walk (teams/provider.py): each turn it reads
the results of the calls it made before — in order — replays the graph from the entry, and either
asks for the next call or ends with the run's answer. The calls are the sub-agent machinery's:
`Agent` spawn / parallel_spawn for a state's agents and its consolidator, `Interruption` ask when a
cap is reached with `interrupt_on_cap`. Between calls the run is parked holding nothing (the Agent
tool parks until its children settle), so a team run survives any crash at any transition: the
transcript holds every transition, and replaying it gives the same next call with the same
tool_use id — which the Agent tool's idempotency turns into the same children, never new ones.

Semantics are loomcycle's teamrun.Walk and NewAgentRunner: output threads to the next state's
input; a consolidator reads `{"results": [{index, agent, ok, output?, error?}]}` and names its edge
on a `signal: <edge>` line (the last one wins, the line is dropped from the output; none means
`success`); every state entry counts against the per-state cap; at the cap the walk ends with
`iteration_cap`, or with `interrupt_on_cap` asks a human: `continue` (another window),
`reroute:<state>`, anything else (and an unanswered question) aborts. A `parallel` state's
`wait` (all | any | at_least:N) goes to Agent.parallel_spawn: once that many agents succeeded the
others are cancelled (their entries `ok: false`, `error: cancelled: …`), as loomcycle's runParallel.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from treadle.teams.graph import Definition, State, required_successes

EMPTY_INPUT = "(no input)"


@dataclass(frozen=True, slots=True)
class Call:
    """The next tool call of the walk, and a line that says what it is for."""

    tool: str
    input: dict[str, Any]
    note: str


@dataclass(slots=True)
class Walked:
    """Where the replay got to: `call` to make next, or `answer` (the run's final JSON)."""

    call: Call | None = None
    answer: dict[str, Any] | None = None
    state: str = ""
    steps: list[dict[str, Any]] = field(default_factory=list)


class _NeedCall(Exception):
    def __init__(self, call: Call) -> None:
        self.call = call


class _Results:
    """The tool results of the run so far, consumed in order by the replay."""

    def __init__(self, results: list[tuple[bool, str]]) -> None:
        self._results = results
        self._next = 0

    def take(self, call: Call) -> tuple[bool, str]:
        if self._next >= len(self._results):
            raise _NeedCall(call)
        out = self._results[self._next]
        self._next += 1
        return out


def parse_signal(output: str) -> tuple[str, str]:
    """(output without its `signal:` lines, the edge the last one names or "")."""
    kept, edge = [], ""
    for line in output.split("\n"):
        stripped = line.strip()
        if stripped[:7].lower() == "signal:":
            value = stripped[7:].strip()
            if value:
                edge = value
            continue
        kept.append(line)
    return "\n".join(kept).rstrip("\n"), edge


def parse_cap_answer(answer: str) -> tuple[str, str]:
    """("continue" | "reroute" | "abort", reroute target)."""
    trimmed = answer.strip()
    if trimmed.lower() == "continue":
        return "continue", ""
    if trimmed.lower().startswith("reroute"):
        target = trimmed[len("reroute"):].strip().removeprefix(":").strip()
        return ("reroute", target) if target else ("abort", "")
    return "abort", ""


def envelope(entries: list[dict[str, Any]]) -> str:
    """What a consolidator reads: loomcycle's `{"results": [...]}`."""
    results = []
    for e in entries:
        r: dict[str, Any] = {"index": e.get("index", 0), "agent": e.get("agent", ""), "ok": bool(e.get("ok"))}
        if e.get("ok") and e.get("output"):
            r["output"] = e["output"]
        if not e.get("ok"):
            r["error"] = str(e.get("error") or e.get("stop_reason") or "failed")
        results.append(r)
    return json.dumps({"results": results}, ensure_ascii=False, separators=(",", ":"))


class WalkFailed(Exception):
    pass


def _entries(result: tuple[bool, str], what: str) -> list[dict[str, Any]]:
    is_error, text = result
    if is_error:
        raise WalkFailed(f"{what}: {text}")
    try:
        value = json.loads(text)
    except ValueError:
        raise WalkFailed(f"{what}: unreadable result {text[:200]!r}") from None
    entries = value if isinstance(value, list) else [value]
    if not all(isinstance(e, dict) for e in entries):
        raise WalkFailed(f"{what}: unreadable result {text[:200]!r}")
    return entries


def _spawn(agent: str, prompt: str, note: str) -> Call:
    return Call("Agent", {"op": "spawn", "name": agent, "prompt": prompt or EMPTY_INPUT}, note)


def _one(results: _Results, agent: str, prompt: str, note: str) -> str:
    entry = _entries(results.take(_spawn(agent, prompt, note)), f"agent {agent!r}")[0]
    if not entry.get("ok"):
        raise WalkFailed(f"agent {agent!r} failed: {entry.get('error') or entry.get('stop_reason')}")
    return str(entry.get("output") or "")


def _run_handler(st: State, text: str, results: _Results, visit: int) -> tuple[str, str, list[str]]:
    """(output, edge or "", agents that ran) of one state visit."""
    h = st.handler
    where = f"state {st.id!r} (visit {visit})"
    if h.kind == "consolidator":
        out, edge = parse_signal(_one(results, h.agent, text, f"{where}: consolidator {h.agent}"))
        return out, edge, [h.agent]
    if h.kind == "agent":
        out = _one(results, h.agent, text, f"{where}: agent {h.agent}")
        if not h.consolidator:
            return out, "", [h.agent]
        entries = [{"index": 0, "agent": h.agent, "ok": True, "output": out}]
        verdict = _one(results, h.consolidator, envelope(entries), f"{where}: consolidator {h.consolidator}")
        out, edge = parse_signal(verdict)
        return out, edge, [h.agent, h.consolidator]
    # parallel
    spawn: dict[str, Any] = {"op": "parallel_spawn", "spawns": [{"name": a, "prompt": text or EMPTY_INPUT}
                                                                 for a in h.agents]}
    if h.wait not in ("", "all"):  # any / at_least:N: the rest are cancelled once enough completed
        spawn["wait"] = h.wait
    call = Call("Agent", spawn, f"{where}: parallel {', '.join(h.agents)}")
    entries = _entries(results.take(call), f"parallel state {st.id!r}")
    need = required_successes(h.wait, len(h.agents))
    ok = sum(1 for e in entries if e.get("ok"))
    if ok < need:
        fails = "; ".join(f"{e.get('agent')}: {e.get('error') or e.get('stop_reason')}" for e in entries
                          if not e.get("ok"))
        raise WalkFailed(f"parallel handler: {ok} of {len(h.agents)} agents succeeded, need {need} "
                         f"(wait={h.wait or 'all'!r}): {fails}")
    verdict = _one(results, h.consolidator, envelope(entries), f"{where}: consolidator {h.consolidator}")
    out, edge = parse_signal(verdict)
    return out, edge, [*h.agents, h.consolidator]


def walk(name: str, def_id: str, d: Definition, task: str, results: list[tuple[bool, str]], *,
         interrupt_on_cap: bool = False) -> Walked:
    """Replay the walk over `results`; the next call, or the answer."""
    seen = _Results(results)
    state, text = d.entry, task
    counts: dict[str, int] = {}
    steps: list[dict[str, Any]] = []
    interruptions, decision = 0, ""
    cap = d.cap

    def answer(status: str, **extra: Any) -> Walked:
        out: dict[str, Any] = {"name": name, "def_id": def_id, "status": status, **extra, "steps": steps}
        if interrupt_on_cap:
            out["interruptions"] = interruptions
            if decision:
                out["cap_decision"] = decision
        return Walked(answer=out, state=state, steps=steps)

    try:
        while True:
            st = d.state(state)
            if st is None:
                return answer("failed", error=f"current state {state!r} is not in the team definition")
            if st.handler.kind == "terminal":
                return answer("completed", final_state=state, final_output=text)
            counts[state] = counts.get(state, 0) + 1
            if counts[state] > cap:
                capped = {"capped_state": state, "max_iterations": cap, "iteration_count": counts[state]}
                if not interrupt_on_cap:
                    return answer("iteration_cap", **capped)
                interruptions += 1
                question = (f"Team {name!r}: state {state!r} hit its iteration cap ({counts[state]} entries > max "
                            f"{cap}). Reply `continue` to grant another {cap}-iteration window, `reroute:<state>` "
                            "to jump to another state, or `abort` to stop.")
                ask = Call("Interruption", {"op": "ask", "question": question,
                                            "options": ["continue", "abort",
                                                        *(f"reroute:{s.id}" for s in d.states)]},
                           f"state {state!r}: iteration cap reached, asking a human")
                is_error, reply = seen.take(ask)
                action, target = "abort", ""
                if not is_error:
                    try:
                        settled = json.loads(reply)
                    except ValueError:
                        settled = {}
                    if isinstance(settled, dict) and settled.get("status") == "resolved":
                        action, target = parse_cap_answer(str(settled.get("answer") or ""))
                if action == "reroute" and d.state(target) is None:
                    action = "abort"
                decision = f"reroute:{target}" if action == "reroute" else action
                if action == "continue":
                    counts[state] = 1
                elif action == "reroute":
                    counts[state] = 0
                    state = target
                    continue
                else:
                    return answer("iteration_cap", **capped)
            out, edge, agents = _run_handler(st, text, seen, counts[state])
            edge = edge or "success"
            nxt = d.next_state(state, edge)
            if nxt is None:
                return answer("failed", error=f"state {state!r} handler selected edge {edge!r} with no matching "
                              "transition")
            steps.append({"state": state, "handler": st.handler.kind, "agent": st.handler.agent or None,
                          "agents": agents, "edge": edge, "next": nxt, "output": out})
            text, state = out, nxt
    except _NeedCall as need:
        return Walked(call=need.call, state=state, steps=steps)
    except WalkFailed as exc:
        return answer("failed", error=f"state {state!r} handler: {exc}")
