"""Documents as Markdown, in loomcycle's export_md shape (so its import_md and ours read each
other's): each chunk a heading (level = depth + 1, at most 6) and its body; with metadata, a
`<!-- loom: {"id", "type", "status", "fields"} -->` line under each heading and a trailer
`<!-- loom-edges:` with one `from -> to [kind]` line per edge leaving the document. A mermaid
chunk's body is written in a ```mermaid fence (and read back out of one). Headings inside code
fences are body text. Pure functions: no I/O."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_EDGE = re.compile(r"^\s*(\S+)\s*->\s*(\S+)\s*\[(.*)\]\s*$")
_MERMAID = re.compile(r"(?s)^```mermaid\s*\n(.*?)\n?```$")


@dataclass(slots=True)
class MdChunk:
    level: int
    title: str
    old_id: str = ""
    type: str | None = None
    status: str | None = None
    fields: Any = None
    body: str = ""


@dataclass(slots=True)
class MdDocument:
    chunks: list[MdChunk] = field(default_factory=list)
    edges: list[tuple[str, str, str]] = field(default_factory=list)


def render(chunks: list[dict[str, Any]], edges: list[tuple[str, str, str]], *, metadata: bool) -> str:
    """`chunks`: the document's rows (id, parent_id, position, type, status, title, body,
    fields), parents before children; `edges`: (from, to, kind) leaving the document."""
    children: dict[str | None, list[dict[str, Any]]] = {}
    for c in chunks:
        children.setdefault(c["parent_id"], []).append(c)
    out: list[str] = []

    def walk(c: dict[str, Any], depth: int) -> None:
        title = " ".join(str(c["title"]).splitlines())
        out.append("#" * min(depth + 1, 6) + " " + title + "\n")
        if metadata:
            meta: dict[str, Any] = {"id": c["id"]}
            for key in ("type", "status", "fields"):
                if c.get(key):
                    meta[key] = c[key]
            out.append("<!-- loom: " + json.dumps(meta, separators=(",", ":"), ensure_ascii=False) + " -->\n")
        body = c.get("body") or ""
        if body:
            out.append("\n```mermaid\n" + body + "\n```\n" if c.get("type") == "mermaid" else "\n" + body + "\n")
        out.append("\n")
        for child in children.get(c["id"], []):
            walk(child, depth + 1)

    for root in children.get(None, []):
        walk(root, 0)
    if metadata and edges:
        out.append("<!-- loom-edges:\n" + "".join(f"{f} -> {t} [{k}]\n" for f, t, k in edges) + "-->\n")
    return "".join(out)


def _fence(line: str) -> tuple[str, int]:
    """(fence character, run length) when the line opens or closes a code fence, else ("", 0)."""
    stripped = line[: len(line) - len(line.lstrip(" "))]
    if len(stripped) > 3:
        return "", 0
    rest = line.lstrip(" ")
    if not rest or rest[0] not in "`~":
        return "", 0
    run = len(rest) - len(rest.lstrip(rest[0]))
    return (rest[0], run) if run >= 3 else ("", 0)


def parse(markdown: str) -> MdDocument:
    """The chunks (in order, with heading levels) and edges of export_md-shaped Markdown."""
    doc = MdDocument()
    lines = markdown.replace("\r\n", "\n").split("\n")
    cur: MdChunk | None = None
    body: list[str] = []
    fence: tuple[str, int] = ("", 0)

    def flush() -> None:
        if cur is not None:
            cur.body = "\n".join(body).strip("\n")
            m = _MERMAID.match(cur.body.strip())
            if m:
                cur.type, cur.body = cur.type or "mermaid", m.group(1)
            doc.chunks.append(cur)

    i = 0
    while i < len(lines):
        line, trimmed = lines[i], lines[i].strip()
        i += 1
        char, run = _fence(line)
        if run:
            if not fence[1]:
                fence = (char, run)
            elif char == fence[0] and run >= fence[1]:
                fence = ("", 0)
            if cur is not None:
                body.append(line)
            continue
        if fence[1]:
            if cur is not None:
                body.append(line)
            continue
        if trimmed.startswith("<!-- loom-edges:"):
            while i < len(lines) and "-->" not in lines[i]:
                m = _EDGE.match(lines[i])
                if m:
                    doc.edges.append((m.group(1), m.group(2), m.group(3)))
                i += 1
            i += 1
            continue
        heading = _HEADING.match(line)
        if heading:
            flush()
            cur, body = MdChunk(len(heading.group(1)), heading.group(2).strip()), []
            continue
        if cur is not None and trimmed.startswith("<!-- loom:") and trimmed.endswith("-->"):
            try:
                meta = json.loads(trimmed[len("<!-- loom:") : -len("-->")].strip())
            except ValueError:
                meta = None
            if isinstance(meta, dict):
                cur.old_id = str(meta.get("id") or "")
                cur.type, cur.status, cur.fields = meta.get("type"), meta.get("status"), meta.get("fields")
            continue
        if cur is not None:
            body.append(line)
    flush()
    return doc
