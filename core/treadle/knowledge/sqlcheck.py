"""The statement floor of SQL memory (loomcycle's RFC AA validator, for Postgres): one statement,
a closed set of leading keywords per op, and no call that reaches outside the scope.

This is defence in depth. What holds against a hostile agent is the database: its statement runs
on a connection logged in as the scope's own role, a member of nothing, with USAGE on its schema
only (store/sqlmem.py). The floor turns the obvious attempts into a model-readable refusal
(`sql_statement_refused`) before they cost a connection, and closes what privileges leave open to
every role: `set_config`/`SET` (the session's own settings: work_mem, search_path), `COPY`
(client-side), transaction control (the runtime owns the transaction)."""

from __future__ import annotations

import re

from treadle.errors import ToolError

#: sql_query: read-only statements; sql_exec: DDL and DML (loomcycle's allow-sets, Postgres tier)
QUERY_LEADING = frozenset({"select", "with", "values", "table"})
EXEC_LEADING = frozenset({"create", "drop", "alter", "insert", "update", "delete", "with", "truncate"})
_DENIED_LEADING = {
    "copy": "COPY is denied (it reads and writes files and the client stream)",
    "set": "SET is denied (the runtime owns the session's settings)",
    "reset": "RESET is denied (the runtime owns the session's settings)",
    "begin": "transaction control is the runtime's: use op sql_begin / sql_commit / sql_rollback",
    "start": "transaction control is the runtime's: use op sql_begin / sql_commit / sql_rollback",
    "commit": "transaction control is the runtime's: use op sql_begin / sql_commit / sql_rollback",
    "rollback": "transaction control is the runtime's: use op sql_begin / sql_commit / sql_rollback",
    "savepoint": "transaction control is the runtime's: use op sql_begin / sql_commit / sql_rollback",
    "release": "transaction control is the runtime's: use op sql_begin / sql_commit / sql_rollback",
    "end": "transaction control is the runtime's: use op sql_begin / sql_commit / sql_rollback",
    "abort": "transaction control is the runtime's: use op sql_begin / sql_commit / sql_rollback",
}
_DANGEROUS_DDL = re.compile(
    r"^\s*(?:create\s+(?:or\s+replace\s+)?(?:trusted\s+)?(?:procedural\s+)?(?:extension|language|server|foreign"
    r"|publication|subscription|role|user|group|database|tablespace|event\s+trigger)"
    r"|alter\s+(?:system|role|user|group|database|tablespace|default\s+privileges|extension|server))\b",
    re.IGNORECASE,
)
#: functions refused anywhere in the text (function bodies included): file and large-object I/O,
#: other databases, the session's settings, signalling other backends
_DENIED_CALLS = re.compile(
    r"(?:\b|\")(set_config|pg_read_file|pg_read_binary_file|pg_stat_file|pg_ls_\w+|lo_\w+|dblink\w*"
    r"|pg_terminate_backend|pg_cancel_backend|pg_reload_conf|pg_rotate_logfile|pg_file_\w+|pg_logdir_ls)\"?\s*\(",
    re.IGNORECASE,
)
_SET_CLAUSE = re.compile(r"\bset\s+(?:local\s+|session\s+)?(?:role|statement_timeout|work_mem|"
                         r"temp_file_limit|search_path|maintenance_work_mem|lock_timeout|"
                         r"idle_\w+|default_transaction\w*)\b", re.IGNORECASE)
_SELECT_INTO = re.compile(r"\binto\b", re.IGNORECASE)
_DATA_MODIFYING = re.compile(r"\b(insert|update|delete|merge|create|drop|alter|truncate)\b", re.IGNORECASE)
MAX_STATEMENT_CHARS = 64 * 1024


def refused(reason: str) -> ToolError:
    return ToolError(f"sql_statement_refused: {reason}", code="sql_statement_refused")


def _scan(text: str) -> tuple[str, str]:
    """(code, masked): the text without comments, and the same with every string literal, quoted
    identifier and dollar-quoted body blanked — so keywords and `;` are found only in code."""
    code: list[str] = []
    masked: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            code.append(" ")
            masked.append(" ")
            continue
        if text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            if depth:
                raise refused("an unterminated /* comment")
            i = j
            code.append(" ")
            masked.append(" ")
            continue
        if c in "'\"":
            j = i + 1
            while True:
                k = text.find(c, j)
                if k < 0:
                    raise refused("an unterminated quoted string or identifier")
                if c == "'" and k > 0 and text[k - 1] == "\\" and i > 0 and text[i - 1] in "eE":
                    j = k + 1
                    continue
                if text.startswith(c * 2, k):
                    j = k + 2
                    continue
                break
            code.append(text[i:k + 1])
            masked.append(c + " " * (k - i - 1) + c)
            i = k + 1
            continue
        if c == "$":
            m = re.match(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$", text[i:])
            if m and not (i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")):
                tag = m.group(0)
                k = text.find(tag, i + len(tag))
                if k < 0:
                    raise refused("an unterminated dollar-quoted string")
                end = k + len(tag)
                code.append(text[i:end])
                masked.append(" " * (end - i))
                i = end
                continue
        code.append(c)
        masked.append(c)
        i += 1
    return "".join(code), "".join(masked)


def check_statement(statement: str, *, read_only: bool) -> tuple[str, str]:
    """(code, masked) of the statement to run — comments removed, a trailing `;` dropped; masked
    with strings blanked — or ToolError `sql_statement_refused` naming why."""
    op = "sql_query" if read_only else "sql_exec"
    if not isinstance(statement, str) or not statement.strip():
        raise ToolError(f"{op}: statement is required (one SQL statement)", code="invalid_input")
    if len(statement) > MAX_STATEMENT_CHARS:
        raise refused(f"the statement is longer than {MAX_STATEMENT_CHARS} characters")
    if "\x00" in statement:
        raise refused("the statement holds a NUL character")
    code, masked = _scan(statement)
    end = len(code)
    while end and code[end - 1].isspace():
        end -= 1
    if end and masked[end - 1] == ";":  # one trailing `;` (outside strings) is allowed
        end -= 1
    while end and code[end - 1].isspace():
        end -= 1
    code, masked = code[:end], masked[:end]
    body = masked
    if ";" in body:
        raise refused("one statement per call (this one holds several)")
    lead = re.match(r"\s*\(*\s*([A-Za-z_]+)", body)
    if not lead:
        raise refused("the statement does not start with an SQL keyword")
    word = lead.group(1).lower()
    if word in _DENIED_LEADING:
        raise refused(_DENIED_LEADING[word])
    allowed = QUERY_LEADING if read_only else EXEC_LEADING
    if word not in allowed:
        kind = "read-only statements (SELECT, WITH … SELECT, VALUES, TABLE)" if read_only else (
            "DDL and DML (CREATE, DROP, ALTER, INSERT, UPDATE, DELETE, TRUNCATE, WITH)")
        raise refused(f"{op} runs {kind}; {word.upper()} is not allowed")
    if _DANGEROUS_DDL.search(body):
        raise refused("extensions, languages, foreign servers, roles, databases and system settings are "
                      "not the scope's to change")
    call = _DENIED_CALLS.search(code)  # function bodies are run later: searched too
    if call:
        raise refused(f"{call.group(1)}() is denied in SQL memory")
    if _SET_CLAUSE.search(code):
        raise refused("a SET clause on roles, sessions or settings is denied in SQL memory")
    if read_only:
        if _SELECT_INTO.search(body):
            raise refused("SELECT … INTO creates a table — sql_query is read-only; use sql_exec")
        if word == "with" and _DATA_MODIFYING.search(body):
            raise refused("sql_query is read-only — this WITH statement modifies data; use sql_exec")
    return code, masked


def for_driver(statement: str, *, read_only: bool, nargs: int) -> str:
    """The checked statement in the driver's placeholder style: `$n` (outside strings) becomes a
    named parameter `%(pn)s` and a literal `%` doubles, so the text reaches the server as written;
    a `$n` beyond the `nargs` given is refused."""
    code, masked = check_statement(statement, read_only=read_only)
    out: list[str] = []
    last = 0
    for m in re.finditer(r"%|\$(\d+)", masked):
        out.append(code[last:m.start()])
        if m.group(0) == "%":
            out.append("%%")
        else:
            n = int(m.group(1))
            if not 1 <= n <= nargs:
                raise refused(f"${n} has no value: args holds {nargs}")
            out.append(f"%(p{n})s")
        last = m.end()
    out.append(code[last:])
    return "".join(out)
