"""SQL text as the driver can cache it.

psycopg converts a statement's `%(name)s` placeholders to `$n` on every execute, and remembers the
conversion only for statements of at most `MAX_CACHED_STATEMENT_LENGTH` (4,096) characters with at
most 50 parameters (`psycopg._queries`: longer ones are taken to be generated, one-off text). A
hot statement written readably — indented, commented — can pass that length and then pays the
parse on every call (13 % of the worker's CPU, for the folded step commit). `compact` removes the
comments and the layout, keeping string literals and quoted identifiers as they are.
"""

from __future__ import annotations

import re

# a literal, a quoted identifier, or a run of whitespace and comments
_TOKEN = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|(?:\s+|--[^\n]*|/\*.*?\*/)+", re.DOTALL)


def compact(sql: str) -> str:
    """`sql` on one line with single spaces and no comments. Refuses what it cannot read safely:
    dollar-quoted bodies and E'' literals (whose backslashes can escape a quote)."""
    if "$$" in sql or re.search(r"\b[Ee]'", sql):
        raise ValueError("compact() does not read dollar-quoted or E'' strings")

    def one(token: re.Match[str]) -> str:
        text = token.group()
        return text if text[0] in "'\"" else " "

    return _TOKEN.sub(one, sql).strip()
