"""A TeamDef's `content_sha256`, byte for byte as loomcycle's teamgraph.Sign computes it.

The hash input is Go's `json.Marshal` of `{name, entry, max_iterations (omitempty), states,
transitions}` in that order — states as `{"state", "handler": {kind, agent, agents, wait,
consolidator, input_template, timeout_ms}}` (handler fields omitted when empty), transitions as
`{"from", "to", "on"}`, a missing `transitions` as `null`. Colours are presentation and stay out:
recolouring a workflow never changes its identity; the tenant stays out too, so two tenants with
the same workflow share a hash.
"""

from __future__ import annotations

import hashlib

from treadle.domain.loomhash import go_json, go_string
from treadle.teams.graph import HANDLER_KEYS, Definition, Handler


def _handler(h: Handler) -> str:
    return "{" + ",".join(f"{go_string(k)}:{go_json(v)}" for k, v in h.to_json().items()
                          if k in HANDLER_KEYS) + "}"


def team_content_json(name: str, d: Definition) -> str:
    parts = [f'"name":{go_string(name)}', f'"entry":{go_string(d.entry)}']
    if d.max_iterations:
        parts.append(f'"max_iterations":{d.max_iterations}')
    states = ",".join(f'{{"state":{go_string(s.id)},"handler":{_handler(s.handler)}}}' for s in d.states)
    parts.append(f'"states":[{states}]')
    if d.transitions is None:
        parts.append('"transitions":null')
    else:
        edges = ",".join(f'{{"from":{go_string(t.source)},"to":{go_string(t.target)},"on":{go_string(t.on)}}}'
                         for t in d.transitions)
        parts.append(f'"transitions":[{edges}]')
    return "{" + ",".join(parts) + "}"


def team_sha256(name: str, d: Definition) -> str:
    """loomcycle's teamgraph.Sign(name, definition)."""
    return "sha256:" + hashlib.sha256(team_content_json(name, d).encode("utf-8", "surrogatepass")).hexdigest()
