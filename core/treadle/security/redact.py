"""Secrets never land: value-based redaction at rest, and a scrub of what is sent to a model.

Known secret values (`SecretValues`) are the values of environment variables whose name marks a
secret (`*_KEY`, `*_TOKEN`, `*_SECRET`, `*_AUTH`, `*_PASSWORD`, `*_CREDENTIAL(S)`, `*_DSN`), the
variables the operator names in `TREADLE_REDACT_ENV`, the providers' key variables, and values
registered at run time (per-run credentials). Each is matched in its literal form and in the forms
it takes when echoed back by an upstream: JSON-escaped, URL-encoded, base64 (standard and URL-safe,
at every byte alignment, so it is found inside a larger encoded blob) and — for keys with a vendor
prefix such as `sk-` or `ghp_` — the part after the prefix. A match becomes `[redacted:NAME]`.

At rest (`redact_text`): every JSON value the stores write (events, memory values, channel
payloads, def bodies — see treadle.store.db.dumps_jsonb) and every log line (`RedactingFilter`).
The replacement never contains a quote or a backslash, so redacted JSON stays valid JSON, and ids
are never secrets, so a tool_use and its tool_result stay paired.

Outbound (`scrub_text`): the known values plus heuristic patterns (Authorization headers, `sk-…`,
`ghp_…`/`github_pat_…`, AWS access keys, Slack tokens, `key=value` secrets) before every model
request.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import os
import re
from collections.abc import Iterable, Mapping
from urllib.parse import quote

SECRET_ENV_NAME = re.compile(r"(_KEY|_TOKEN|_SECRET|_AUTH|_PASSWORD|_CREDENTIAL|_CREDENTIALS|_DSN)$", re.IGNORECASE)
MIN_SECRET_LENGTH = 8
_VENDOR_PREFIX = re.compile(r"^(sk-ant-[a-z0-9]+-|sk-proj-|sk-|ghp_|gho_|ghs_|github_pat_|xox[baprs]-|AKIA)")
_LABEL = re.compile(r"[^A-Za-z0-9_]")

#: the heuristic patterns of the outbound scrub: (pattern, replacement); a tuple, because
#: `_ANY_PATTERN` below is made from it once
PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?i)(authorization\s*[:=]\s*(?:bearer|token|basic)\s+)[^\s\"',;]+"), r"\1[redacted]"),
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"), "[redacted-key]"),
    (re.compile(r"\b(?:ghp|gho|ghs|ghu|ghr)_[A-Za-z0-9]{36,}"), "[redacted-token]"),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}"), "[redacted-token]"),
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), "[redacted-aws-key]"),
    (re.compile(r"\bxox[baprs]-[A-Za-z0-9\-]{10,}"), "[redacted-slack]"),
    (re.compile(r"(?i)\b((?:api[_-]?key|secret|token|password|passwd)\s*[:=]\s*)[\"']?[^\s\"',;&]{6,}"),
     r"\1[redacted]"),
)


def _either(patterns: tuple[tuple[re.Pattern[str], str], ...]) -> re.Pattern[str]:
    """One pattern that matches wherever any of `patterns` does (a leading `(?i)` made local)."""
    parts = [f"(?i:{p.pattern[4:]})" if p.pattern.startswith("(?i)") else f"(?:{p.pattern})" for p, _ in patterns]
    return re.compile("|".join(parts))


#: most text holds none of the patterns: one search tells, instead of one substitution per pattern
_ANY_PATTERN = _either(PATTERNS)


def _base64_forms(raw: bytes) -> set[str]:
    """The base64 text of `raw` at each byte alignment: the characters that depend only on it."""
    forms: set[str] = set()
    for k in range(3):
        enc = base64.b64encode(b"\0" * k + raw).decode()
        start, end = math.ceil(8 * k / 6), (8 * (k + len(raw))) // 6
        core = enc[start:end]
        if len(core) >= 12:
            forms.add(core)
            forms.add(core.replace("+", "-").replace("/", "_"))
    return forms


def forms_of(value: str) -> set[str]:
    """Every form of `value` redaction looks for (see the module docstring)."""
    values = {value}
    stripped = _VENDOR_PREFIX.sub("", value)
    if stripped != value and len(stripped) >= 16:
        values.add(stripped)
    out: set[str] = set()
    for v in values:
        out.add(v)
        out.add(json.dumps(v)[1:-1])
        out.add(quote(v, safe=""))
        out |= _base64_forms(v.encode())
    return {f for f in out if len(f) >= MIN_SECRET_LENGTH}


class SecretValues:
    """The known secret values of this process, each with its forms, replaced longest first."""

    def __init__(self) -> None:
        self._labels: dict[str, str] = {}  # form → label
        self._pattern: re.Pattern[str] | None = None  # every form, longest first
        self.enabled = True

    def add(self, value: str | None, name: str) -> None:
        if not value or len(value.strip()) < MIN_SECRET_LENGTH:
            return
        label = "[redacted:" + _LABEL.sub("_", name)[:64] + "]"
        changed = False
        for form in forms_of(value):
            if form not in self._labels:
                self._labels[form] = label
                changed = True
        if changed:
            forms = sorted(self._labels, key=len, reverse=True)
            self._pattern = re.compile("|".join(map(re.escape, forms)))

    def add_env(self, environ: Mapping[str, str], extra_names: Iterable[str] = ()) -> None:
        extra = set(extra_names)
        for name, value in environ.items():
            if name in extra or SECRET_ENV_NAME.search(name):
                self.add(value, name)

    def __len__(self) -> int:
        return len(self._labels)

    def redact_text(self, text: str) -> str:
        if self._pattern is None or not self.enabled or len(text) < MIN_SECRET_LENGTH:
            return text
        return self._pattern.sub(lambda m: self._labels[m.group(0)], text)

    def scrub_text(self, text: str) -> str:
        """The outbound scrub: the known values, then the heuristic patterns."""
        if not self.enabled:
            return text
        text = self.redact_text(text)
        if not _ANY_PATTERN.search(text):
            return text
        for pattern, replacement in PATTERNS:
            text = pattern.sub(replacement, text)
        return text


#: the process's secrets (the runtime fills it at open; a stored JSON value passes through it)
SECRETS = SecretValues()


def load_process_secrets(extra_env_names: Iterable[str] = (), enabled: bool = True) -> SecretValues:
    SECRETS.enabled = enabled
    SECRETS.add_env(os.environ, extra_env_names)
    return SECRETS


class RedactingFilter(logging.Filter):
    """Replaces known secret values in a log record's rendered message (install on handlers)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if len(SECRETS):
            message = record.getMessage()
            redacted = SECRETS.redact_text(message)
            if redacted != message:
                record.msg, record.args = redacted, None
        return True


def install_log_redaction(logger: logging.Logger | None = None) -> None:
    """Add the filter to every handler of `logger` (default: the root logger), once."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
