"""Skill names with `/` groups and the `skills:` pattern allowlist, as loomcycle reads them
(internal/skillmatch): one rule for listing, invoking (the Skill tool) and authoring (SkillDef).

A skill name is one or more segments of `[A-Za-z0-9_-]` joined by `/` (`doc/redactor`); no empty,
`.` or `..` segment, at most 128 characters. An allowlist entry is `pat`, `+pat` (allow) or `-pat`
(deny), `pat` a `/`-segmented glob: `*` one segment, `**` any number of segments, `?` one
character; a lone `*`/`**` matches every name. Evaluation: a negative match always denies; with
at least one positive entry a name must match one (whitelist); otherwise everything not denied is
allowed — an empty list allows all, `-*` denies all.

treadle keeps one addition: an entry that is a plain name (no sign, no glob) is a skill the agent
*bundles* — its body is added to the system prompt at run start, as before skills on demand.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

MAX_SKILL_NAME = 128
_SEGMENT = re.compile(r"^[A-Za-z0-9_-]+$")
_PATTERN_SEGMENT = re.compile(r"^[A-Za-z0-9_*?-]+$")


def name_problem(name: object) -> str | None:
    """Why `name` is not a valid skill name, or None."""
    if not isinstance(name, str) or not name:
        return "a skill name must be a non-empty string"
    if len(name) > MAX_SKILL_NAME:
        return f"skill name {name[:40]!r}… is longer than {MAX_SKILL_NAME} characters"
    for seg in name.split("/"):
        if seg in ("", ".", ".."):
            return f"skill name {name!r} has an empty, '.' or '..' segment"
        if not _SEGMENT.match(seg):
            return f"skill name {name!r}: segment {seg!r} may hold only A-Z a-z 0-9 _ -"
    return None


def is_skill_name(name: object) -> bool:
    return name_problem(name) is None


def pattern_problem(entry: object) -> str | None:
    """Why `entry` is not a valid `skills:` allowlist entry, or None."""
    if not isinstance(entry, str) or not entry.strip():
        return "a skills entry must be a non-empty string"
    pat = entry.strip()
    if pat[0] in "+-":
        pat = pat[1:]
    if not pat:
        return f"skills entry {entry!r}: a pattern must follow the sign"
    if len(pat) > MAX_SKILL_NAME:
        return f"skills entry {entry[:40]!r}… is longer than {MAX_SKILL_NAME} characters"
    for seg in pat.split("/"):
        if seg in ("", ".", ".."):
            return f"skills entry {entry!r} has an empty, '.' or '..' segment"
        if not _PATTERN_SEGMENT.match(seg):
            return f"skills entry {entry!r}: segment {seg!r} may hold only A-Z a-z 0-9 _ - * ?"
    return None


def _split(entry: str) -> tuple[bool, str] | None:
    """(negative, pattern), or None for an empty entry."""
    entry = entry.strip()
    neg = entry.startswith("-")
    pat = entry[1:] if entry[:1] in ("+", "-") else entry
    return (neg, pat) if pat else None


def is_literal(entry: str) -> bool:
    """A plain skill name (no sign, no glob): a skill the agent bundles into its prompt."""
    return entry[:1] not in ("+", "-") and is_skill_name(entry)


def literals(patterns: Sequence[str]) -> list[str]:
    return [e for e in patterns if is_literal(e)]


def has_patterns(patterns: Sequence[str]) -> bool:
    """Whether the allowlist has an entry beyond plain names (a sign or a glob): skills on demand."""
    return any(not is_literal(e) for e in patterns)


def _match_all(pat: str) -> bool:
    return pat in ("*", "**")


def _seg_match(pat: str, seg: str) -> bool:
    if "*" not in pat and "?" not in pat:
        return pat == seg
    rx = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pat)
    return re.fullmatch(rx, seg, flags=re.DOTALL) is not None


def _match(pat: list[str], path: list[str]) -> bool:
    if not pat:
        return not path
    if pat[0] == "**":
        return any(_match(pat[1:], path[i:]) for i in range(len(path) + 1))
    return bool(path) and _seg_match(pat[0], path[0]) and _match(pat[1:], path[1:])


def matches(pattern: str, name: str) -> bool:
    """Whether one (sign-stripped) pattern matches `name`."""
    return _match_all(pattern) or _match(pattern.split("/"), name.split("/"))


def allowed(patterns: Sequence[str], name: str) -> bool:
    """loomcycle's skillmatch.Allowed: negatives win; positives make it a whitelist; empty allows all."""
    has_positive = matched_positive = False
    for entry in patterns:
        split = _split(entry)
        if split is None:
            continue
        neg, pat = split
        if neg:
            if matches(pat, name):
                return False
            continue
        has_positive = True
        matched_positive = matched_positive or matches(pat, name)
    return matched_positive or not has_positive


def denies_all(patterns: Sequence[str]) -> bool:
    """`-*` / `-**`: no skill at all."""
    return any(s is not None and s[0] and _match_all(s[1]) for s in map(_split, patterns))


#: the tool that lists and loads skills on demand
SKILL_TOOL = "Skill"


def uses_skill_tool(tools: Sequence[str], patterns: Sequence[str]) -> bool:
    """Whether an agent holds the Skill tool: named in its `tools:`, or added because its `skills:`
    has an on-demand entry (a sign or a glob) and does not deny everything."""
    if denies_all(patterns):
        return False
    return SKILL_TOOL in tools or has_patterns(patterns)
