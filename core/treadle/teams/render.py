"""A team's graph as a Mermaid `stateDiagram-v2`, line for line as loomcycle's
teamgraph.RenderMermaid (render.go, colors.go) writes it.

States get unsaturated fills through `classDef` (an explicit `colors.states` value — a palette
name or `#rgb`/`#rrggbb`, anything else ignored so nothing foreign reaches the diagram — else a
role keyword of the state id or its agents, else a fixed rotation); a highlighted state (the one a
run is in) gets a bold outline. Ids and labels are sanitised so a name cannot break out of its line.
"""

from __future__ import annotations

import re

from treadle.teams.graph import Definition, State

#: palette name → (unsaturated fill, saturated accent)
HUES = {
    "cyan": ("#99e9f2", "#1098ad"), "yellow": ("#ffec99", "#f08c00"), "orange": ("#ffd8a8", "#e8590c"),
    "blue": ("#a5d8ff", "#1c7ed6"), "red": ("#ffc9c9", "#e03131"), "pink": ("#fcc2d7", "#e64980"),
    "violet": ("#d0bfff", "#7048e8"), "green": ("#b2f2bb", "#2f9e44"),
}
ROTATION = ("cyan", "yellow", "orange", "blue", "red", "pink", "violet", "green")
KEYWORD_HUES = (("rfc", "cyan"), ("architect", "yellow"), ("plan", "orange"), ("implement", "blue"),
                ("code", "blue"), ("qa", "red"), ("review", "pink"), ("consolidat", "violet"),
                ("publish", "green"), ("ship", "green"), ("pr", "green"))
_HEX = re.compile(r"^#([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$")


def sanitize(s: str) -> str:
    """loomcycle's mmSanitize: no newline, no `-->`, no `%%` inside an id or a label."""
    return s.replace("\n", " ").replace("\r", " ").replace("-->", "__").replace("%%", "__")


def _color_value(v: str) -> tuple[str, str] | None:
    v = v.strip()
    if not v:
        return None
    hue = HUES.get(v.lower())
    if hue is not None:
        return hue
    return (v, v) if _HEX.match(v) else None


def _tokens(s: str) -> list[str]:
    return [t for t in re.split(r"[_/-]", s.lower()) if t]


def _keyword_hue(s: State) -> str | None:
    tokens = _tokens(s.id) + _tokens(s.handler.agent)
    for a in s.handler.agents:
        tokens += _tokens(a)
    for keyword, hue in KEYWORD_HUES:
        if any(t.startswith(keyword) for t in tokens):
            return hue
    return None


def scheme(d: Definition) -> tuple[dict[str, str], dict[str, str]]:
    """(fill, accent) per state id: explicit colour → role keyword → rotation."""
    fill: dict[str, str] = {}
    accent: dict[str, str] = {}
    auto = 0
    explicit = (d.colors or {}).get("states", {})
    for s in d.states:
        chosen = _color_value(explicit[s.id]) if explicit.get(s.id, "").strip() else None
        if chosen is None:
            hue = _keyword_hue(s)
            if hue is not None:
                chosen = HUES[hue]
        if chosen is None:
            chosen = HUES[ROTATION[auto % len(ROTATION)]]
            auto += 1
        fill[s.id], accent[s.id] = chosen
    return fill, accent


def _class(fill: str) -> str:
    return "c" + ("".join(c for c in fill if c.isascii() and c.isalnum()) or "x")


def render_mermaid(name: str, d: Definition, highlight: str = "") -> str:
    fill, accent = scheme(d)
    outbound = {t.source for t in d.transitions or ()}
    lines = ["stateDiagram-v2"]
    if name:
        lines.append(f"  %% {sanitize(name)}")
    if d.entry:
        lines.append(f"  [*] --> {sanitize(d.entry)}")
    for t in d.transitions or ():
        lines.append(f"  {sanitize(t.source)} --> {sanitize(t.target)}: {sanitize(t.on)}")
    for s in d.states:
        if s.handler.kind == "terminal" or s.id not in outbound:
            lines.append(f"  {sanitize(s.id)} --> [*]")
    for s in d.states:
        h = s.handler
        if h.kind == "parallel":
            lines.append(f"  note right of {sanitize(s.id)}")
            lines.append(f"    parallel: {sanitize(', '.join(h.agents))} (wait: {h.wait or 'all'})")
            if h.consolidator:
                lines.append(f"    consolidator: {sanitize(h.consolidator)}")
            lines.append("  end note")
    order: list[str] = []
    for s in d.states:
        f = fill.get(s.id, "")
        if f and f not in order:
            order.append(f)
    for f in order:
        users = sorted(s.id for s in d.states if fill.get(s.id) == f)
        stroke = accent.get(users[0]) or f
        lines.append(f"  classDef {_class(f)} fill:{f},color:#111,stroke:{stroke}")
    highlighted = bool(highlight) and bool(fill.get(highlight))
    if highlighted:
        f = fill[highlight]
        lines.append(f"  classDef {_class(f)}_hl fill:{f},color:#111,stroke:#111,stroke-width:3px")
    for s in d.states:
        f = fill.get(s.id, "")
        if not f:
            continue
        suffix = "_hl" if highlighted and s.id == highlight else ""
        lines.append(f"  class {sanitize(s.id)} {_class(f)}{suffix}")
    return "\n".join(lines) + "\n"
