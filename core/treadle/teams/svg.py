"""A team's graph as an SVG picture, laid out here (no Mermaid, no browser, no network).

`render_diagram` with `format: "svg"` answers this; the web page draws it (rebuilt element by
element from a fixed list of SVG elements and attributes, text as text) with the state a live
team run is in outlined. Why our own layout rather than a vendored Mermaid: the page's
Content-Security-Policy allows no inline style and its scripts use no `innerHTML` — Mermaid's
renderer needs both — and a ~3 MB bundle would be the page's largest file by far; a team graph
is small (states in ranks, a few loop-backs), which a layered layout draws well.

The layout: states are ranked top to bottom by the longest path from `entry` over the forward
edges (an edge back to a state on the current depth-first path — a pushback loop — is drawn
around the right side instead), ordered within a rank by the mean position of their
predecessors, and centred. Colours are the Mermaid diagram's (teams/render.py `scheme`).
"""

from __future__ import annotations

from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from treadle.teams.graph import Definition, State
from treadle.teams.render import scheme

CHAR_W = 7.3  # px per character of 12 px monospace
LINE_H = 16
PAD_X, PAD_Y = 12, 8
GAP_X, GAP_Y = 36, 64
TOP = 44  # room for the start dot
LOOP_GAP = 26  # between loop-back lanes on the right


@dataclass(slots=True)
class _Box:
    state: State
    lines: list[str]
    w: float
    h: float
    x: float = 0.0
    y: float = 0.0

    @property
    def cx(self) -> float:
        return self.x + self.w / 2


def _lines(s: State) -> list[str]:
    h = s.handler
    if h.kind == "terminal":
        return [s.id, "terminal"]
    if h.kind == "parallel":
        out = [s.id, f"parallel: {', '.join(h.agents)}", f"wait: {h.wait or 'all'}"]
    else:
        out = [s.id, f"{h.kind}: {h.agent}"]
    if h.consolidator:
        out.append(f"consolidator: {h.consolidator}")
    return out


def _ranks(d: Definition) -> tuple[dict[str, int], set[tuple[str, str, str]]]:
    """(rank per state, the back edges (source, target, on))."""
    out: dict[str, list[tuple[str, str]]] = {s.id: [] for s in d.states}
    for t in d.transitions or ():
        out.setdefault(t.source, []).append((t.target, t.on))
    back: set[tuple[str, str, str]] = set()
    on_path: set[str] = set()
    seen: set[str] = set()

    def dfs(v: str) -> None:  # graphs are small (validated); recursion depth = states
        seen.add(v)
        on_path.add(v)
        for w, on in out.get(v, []):
            if w in on_path:
                back.add((v, w, on))
            elif w not in seen:
                dfs(w)
        on_path.discard(v)

    if d.entry:
        dfs(d.entry)
    for s in d.states:
        if s.id not in seen:
            dfs(s.id)
    rank = {s.id: 0 for s in d.states}
    for _ in range(len(d.states)):  # longest path over the forward edges (a DAG)
        changed = False
        for v, edges in out.items():
            for w, on in edges:
                if (v, w, on) not in back and w in rank and rank.get(v, 0) + 1 > rank[w]:
                    rank[w] = rank.get(v, 0) + 1
                    changed = True
        if not changed:
            break
    return rank, back


def _text(x: float, y: float, s: str, *, size: int = 12, weight: str = "normal", anchor: str = "middle",
          fill: str = "#111") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-family="monospace" font-size="{size}" font-weight="{weight}" '
            f'text-anchor="{anchor}" fill="{fill}">{escape(s)}</text>')


def _arrow(x: float, y: float, dx: float, dy: float) -> str:
    """A filled arrowhead at (x, y) pointing along (dx, dy)."""
    n = (dx * dx + dy * dy) ** 0.5 or 1.0
    ux, uy = dx / n, dy / n
    bx, by = x - ux * 9, y - uy * 9
    px, py = -uy * 4.5, ux * 4.5
    return (f'<polygon points="{x:.1f},{y:.1f} {bx + px:.1f},{by + py:.1f} {bx - px:.1f},{by - py:.1f}" '
            'fill="#444"/>')


def _label(x: float, y: float, s: str) -> str:
    w = len(s) * 6.2 + 8
    return (f'<rect x="{x - w / 2:.1f}" y="{y - 10:.1f}" width="{w:.1f}" height="14" rx="3" fill="#fff" '
            f'fill-opacity="0.9"/>' + _text(x, y, s, size=10, fill="#333"))


def _place(ps: list[str] | None, order: dict[str, float], default: float) -> float:
    """Where a state goes in its row: the mean position of its predecessors (else its own order)."""
    return sum(order.get(p, 0.0) for p in ps) / len(ps) if ps else default


def render_svg(name: str, d: Definition, highlight: str = "") -> str:
    """The picture of `d`; the state `highlight` (a run's current state) outlined bold."""
    fill, accent = scheme(d)
    rank, back = _ranks(d)
    boxes = {}
    for s in d.states:
        lines = _lines(s)
        w = max(96.0, max(len(line) for line in lines) * CHAR_W + 2 * PAD_X)
        boxes[s.id] = _Box(s, lines, w, len(lines) * LINE_H + 2 * PAD_Y)
    rows: dict[int, list[str]] = {}
    for s in d.states:
        rows.setdefault(rank[s.id], []).append(s.id)
    preds: dict[str, list[str]] = {}
    for t in d.transitions or ():
        if (t.source, t.target, t.on) not in back:
            preds.setdefault(t.target, []).append(t.source)
    order: dict[str, float] = {}
    for r in sorted(rows):  # a row ordered by where its predecessors stand
        keyed = [(_place(preds.get(sid), order, float(i)), i, sid) for i, sid in enumerate(rows[r])]
        rows[r] = [sid for _, _, sid in sorted(keyed)]
        for i, sid in enumerate(rows[r]):
            order[sid] = float(i)
    widths = {r: sum(boxes[s].w for s in row) + GAP_X * (len(row) - 1) for r, row in rows.items()}
    inner = max(widths.values(), default=120.0)
    heights = {r: max(boxes[s].h for s in row) for r, row in rows.items()}
    y = float(TOP)
    for r in sorted(rows):
        x = 24 + (inner - widths[r]) / 2
        for sid in rows[r]:
            b = boxes[sid]
            b.x, b.y = x, y + (heights[r] - b.h) / 2
            x += b.w + GAP_X
        y += heights[r] + GAP_Y
    lanes = sorted(back, key=lambda e: (rank.get(e[0], 0) - rank.get(e[1], 0), e))
    width = 24 + inner + 24 + LOOP_GAP * len(lanes) + (60 if lanes else 0)
    height = y - GAP_Y + 40
    parts: list[str] = []
    # the start dot and its arrow to the entry
    if d.entry in boxes:
        e = boxes[d.entry]
        parts.append(f'<circle cx="{e.cx:.1f}" cy="12" r="7" fill="#111"/>')
        parts.append(f'<path d="M{e.cx:.1f},19 L{e.cx:.1f},{e.y:.1f}" stroke="#444" stroke-width="1.5" fill="none"/>')
        parts.append(_arrow(e.cx, e.y, 0, 1))
    # forward edges: bottom of the source to the top of the target
    fan: dict[str, int] = {}
    for t in d.transitions or ():
        if (t.source, t.target, t.on) in back or t.source not in boxes or t.target not in boxes:
            continue
        a, b = boxes[t.source], boxes[t.target]
        k = fan[t.source] = fan.get(t.source, 0) + 1
        sx, sy, tx, ty = a.cx + (k - 1) * 10, a.y + a.h, b.cx, b.y
        my = (sy + ty) / 2
        parts.append(f'<path d="M{sx:.1f},{sy:.1f} C{sx:.1f},{my:.1f} {tx:.1f},{my:.1f} {tx:.1f},{ty:.1f}" '
                     'stroke="#444" stroke-width="1.5" fill="none"/>')
        parts.append(_arrow(tx, ty, 0, 1))
        parts.append(_label((sx + tx) / 2, my + 4, t.on))
    # loop-backs: out of the source's right side, up a lane on the right, into the target's right side
    right = 24 + inner
    for i, (src, dst, on) in enumerate(lanes):
        if src not in boxes or dst not in boxes:
            continue
        a, b = boxes[src], boxes[dst]
        lane = right + LOOP_GAP * (i + 1)
        sy, ty = a.y + a.h / 2 + 6, b.y + b.h / 2 - 6
        parts.append(f'<path d="M{a.x + a.w:.1f},{sy:.1f} L{lane:.1f},{sy:.1f} L{lane:.1f},{ty:.1f} '
                     f'L{b.x + b.w:.1f},{ty:.1f}" stroke="#444" stroke-width="1.5" stroke-dasharray="5 3" '
                     'fill="none"/>')
        parts.append(_arrow(b.x + b.w, ty, -1, 0))
        parts.append(_label(lane, (sy + ty) / 2, on))
    # the states, drawn last (over the edges)
    for s in d.states:
        b = boxes[s.id]
        current = s.id == highlight
        cls = "state current" if current else "state"
        stroke, sw = ("#111", "3.5") if current else (accent.get(s.id, "#666"), "1.5")
        parts.append(f'<g class="{cls}" data-state={quoteattr(s.id)}>')
        parts.append(f'<title>{escape(s.id + (" (current state)" if current else ""))}</title>')
        parts.append(f'<rect x="{b.x:.1f}" y="{b.y:.1f}" width="{b.w:.1f}" height="{b.h:.1f}" rx="8" '
                     f'fill={quoteattr(fill.get(s.id, "#eee"))} stroke={quoteattr(stroke)} stroke-width="{sw}"/>')
        if s.handler.kind == "terminal":
            parts.append(f'<rect x="{b.x + 4:.1f}" y="{b.y + 4:.1f}" width="{b.w - 8:.1f}" height="{b.h - 8:.1f}" '
                         f'rx="6" fill="none" stroke={quoteattr(stroke)} stroke-width="1"/>')
        for j, line in enumerate(b.lines):
            ty = b.y + PAD_Y + LINE_H * j + 12
            parts.append(_text(b.cx, ty, line, weight="bold" if j == 0 else "normal",
                               size=12 if j == 0 else 11))
        if current:
            parts.append(_text(b.x - 6, b.y + 14, "▶", anchor="end", size=14))
        parts.append("</g>")
    label = f"team {name}" + (f", current state {highlight}" if highlight else "")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="team-diagram" role="img" '
            f'aria-label={quoteattr(label)} width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}"><title>{escape(label)}</title>' + "".join(parts) + "</svg>")
