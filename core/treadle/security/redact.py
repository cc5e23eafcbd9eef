"""Secrets never land: value-based redaction at rest, and a scrub of what is sent to a model.

Known secret values (`SecretValues`) are the values of environment variables whose name marks a
secret (`*_KEY`, `*_TOKEN`, `*_SECRET`, `*_AUTH`, `*_PASSWORD`, `*_CREDENTIAL(S)`, `*_DSN`), the
variables the operator names in `TREADLE_REDACT_ENV`, the providers' key variables, and values
registered at run time (a run's `user_credentials`, kept for the last `DYNAMIC_CAP` of them). Each
is matched in its literal form and in the forms it takes when echoed back by an upstream:
JSON-escaped, URL-encoded, hex, base64 (standard and URL-safe, at every byte alignment, so it is
found inside a larger encoded blob) and — for keys with a vendor prefix such as `sk-` or `ghp_` —
the part after the prefix. A match becomes `[redacted:NAME]`.

Secret-shaped strings are matched too (`PATTERNS`): provider key formats, `Authorization:`
headers and `Bearer` tokens, `password=`/`secret=`/`api_key=` values. At rest the high-confidence
ones apply (`at_rest`; the operator switch `TREADLE_REDACT_PATTERNS=false` turns them off), and
outbound all of them.

At rest (`redact_text`): every JSON value the stores write (events, memory values, channel
payloads, def bodies — see treadle.store.db.dumps_jsonb) and every log line (`RedactingFilter`).
A replacement never contains a quote or a backslash and a pattern's value never spans a
backslash, so redacted JSON stays valid JSON; ids are never secrets, so a tool_use and its
tool_result stay paired.

Outbound (`scrub_text`): the same values plus every pattern, before every model request.

Why one Aho-Corasick pass (ahocorasick_rs): a regular expression made of many alternatives costs
Python's `re` ~100 ns a byte (every alternative tried at every position); one automaton holding
every form of every known value and a literal anchor of every pattern tells in ~5 ns a byte which
text holds no candidate at all (most text), and where the candidates are: a known form is
replaced where it was found, a pattern is tried (`match`) only at its anchors.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import quote

import ahocorasick_rs

SECRET_ENV_NAME = re.compile(r"(_KEY|_TOKEN|_SECRET|_AUTH|_PASSWORD|_CREDENTIAL|_CREDENTIALS|_DSN)$", re.IGNORECASE)
MIN_SECRET_LENGTH = 8
#: run-time values (run credentials) remembered per process, the oldest forgotten first
DYNAMIC_CAP = 4096
_VENDOR_PREFIX = re.compile(r"^(sk-ant-[a-z0-9]+-|sk-proj-|sk-|ghp_|gho_|ghs_|github_pat_|xox[baprs]-|AKIA)")
_LABEL = re.compile(r"[^A-Za-z0-9_]")


@dataclass(frozen=True, slots=True)
class SecretPattern:
    """A secret-shaped string: every match starts with one of `anchors` (matched in the casings
    listed, the pattern itself may be case-insensitive) — so it is tried only there."""

    pattern: re.Pattern[str]
    replacement: str
    anchors: tuple[str, ...]
    at_rest: bool


def _cased(*words: str) -> tuple[str, ...]:
    """The casings an anchor is looked for in: as written, lower, Title and UPPER."""
    return tuple(dict.fromkeys(f for w in words for f in (w, w.lower(), w.title(), w.upper())))


_VALUE = r"[^\s\"',;&\\]"  # a secret's characters: never a quote or a backslash (JSON stays valid)

_KEYWORD = r"(?:api[_-]?key|secret|password|passwd)"
#: the patterns (scrubbed outbound; those `at_rest` also before anything is stored)
PATTERNS: tuple[SecretPattern, ...] = (
    SecretPattern(re.compile(r"(?i)(authorization\s*[:=]\s*(?:bearer|token|basic)\s+)[^\s\"',;\\]+"),
                  r"\1[redacted]", _cased("authorization"), True),
    SecretPattern(re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9\-._~+/]{16,}=*"), r"\1[redacted]", _cased("bearer"), True),
    SecretPattern(re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"), "[redacted-key]", ("sk-",), True),
    SecretPattern(re.compile(r"\b(?:ghp|gho|ghs|ghu|ghr)_[A-Za-z0-9]{36,}"), "[redacted-token]",
                  ("ghp_", "gho_", "ghs_", "ghu_", "ghr_"), True),
    SecretPattern(re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}"), "[redacted-token]", ("github_pat_",), True),
    SecretPattern(re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), "[redacted-aws-key]", ("AKIA", "ASIA"), True),
    SecretPattern(re.compile(r"\bxox[baprs]-[A-Za-z0-9\-]{10,}"), "[redacted-slack]", ("xox",), True),
    SecretPattern(re.compile(r"(?i)\b(" + _KEYWORD + r"\s*[:=]\s*)(?:\\?[\"'])?" + _VALUE + "{6,}"),
                  r"\1[redacted]", _cased("api_key", "api-key", "apikey", "apiKey", "secret", "password", "passwd"),
                  True),
    # a JSON field: "password": "value" (inside a stored JSON text the quotes are escaped)
    SecretPattern(re.compile(r"(?i)\b(" + _KEYWORD + r"\\?[\"']\s*:\s*\\?[\"'])" + _VALUE + "{6,}"),
                  r"\1[redacted]", _cased("api_key", "api-key", "apikey", "apiKey", "secret", "password", "passwd"),
                  True),
    SecretPattern(re.compile(r"(?i)\b(token\s*[:=]\s*)(?:\\?[\"'])?" + _VALUE + "{6,}"), r"\1[redacted]",
                  _cased("token"), False),
)

_ANCHORS: tuple[str, ...] = tuple(dict.fromkeys(a for p in PATTERNS for a in p.anchors))
#: anchor → the indexes (in PATTERNS) of the patterns it starts
_ANCHOR_PATTERNS: dict[str, tuple[int, ...]] = {
    a: tuple(i for i, p in enumerate(PATTERNS) if a in p.anchors) for a in _ANCHORS}
_ANCHORS_ONLY = ahocorasick_rs.AhoCorasick(list(_ANCHORS), implementation=ahocorasick_rs.Implementation.DFA)


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
        raw = v.encode()
        out.add(raw.hex())
        out.add(raw.hex().upper())
        out |= _base64_forms(raw)
    return {f for f in out if len(f) >= MIN_SECRET_LENGTH}


class _Scanner:
    """One automaton: every known form (indexes below `n_forms`), then every pattern anchor."""

    __slots__ = ("automaton", "forms", "labels", "n_forms")

    def __init__(self, labels: Mapping[str, str]) -> None:
        self.forms = list(labels)
        self.labels = [labels[f] for f in self.forms]
        self.n_forms = len(self.forms)
        patterns = [*self.forms, *_ANCHORS]
        # a DFA scans twice as fast as the NFAs, at a memory cost that grows with the patterns
        impl = ahocorasick_rs.Implementation.DFA if len(patterns) <= 4000 else None
        self.automaton = ahocorasick_rs.AhoCorasick(patterns, implementation=impl)


def _splice(text: str, spans: list[tuple[int, int, str]]) -> str:
    out: list[str] = []
    at = 0
    for start, end, repl in spans:
        out.append(text[at:start])
        out.append(repl)
        at = end
    out.append(text[at:])
    return "".join(out)


def _leftmost_longest(hits: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Non-overlapping hits, leftmost first and the longest among those starting together."""
    chosen: list[tuple[int, int, int]] = []
    end = -1
    for idx, start, stop in sorted(hits, key=lambda h: (h[1], h[1] - h[2])):
        if start >= end:
            chosen.append((idx, start, stop))
            end = stop
    return chosen


def _apply_patterns(text: str, anchor_hits: Iterable[tuple[str, int]], at_rest: bool) -> str:
    """Each pattern tried where one of its anchors was found; the matches replaced."""
    spans: list[tuple[int, int, str]] = []
    end = -1
    for anchor, pos in sorted(anchor_hits, key=lambda h: h[1]):
        if pos < end:
            continue
        for i in _ANCHOR_PATTERNS[anchor]:
            p = PATTERNS[i]
            if at_rest and not p.at_rest:
                continue
            m = p.pattern.match(text, pos)
            if m is not None and m.end() > m.start():
                spans.append((m.start(), m.end(), m.expand(p.replacement)))
                end = m.end()
                break
    return _splice(text, spans) if spans else text


#: redact_text remembers up to CLEAN_CACHE_SIZE clean texts of at most CLEAN_CACHE_TEXT_MAX characters
CLEAN_CACHE_SIZE = 4096
CLEAN_CACHE_TEXT_MAX = 128


class SecretValues:
    """The known secret values of this process, each with its forms, and the secret patterns."""

    def __init__(self) -> None:
        self._labels: dict[str, str] = {}  # form → label (the static values)
        self._dynamic: OrderedDict[str, dict[str, str]] = OrderedDict()  # value → its forms' labels
        self._scanner = _Scanner({})
        #: changes whenever the known values do (what a cache of scrubbed text depends on)
        self.generation = 0
        self._lock = threading.Lock()
        #: short texts found clean (outbound, at rest) under the current values and switches:
        #: emptied whenever one of them changes (`_forget_clean`)
        self._clean: tuple[set[str], set[str]] = (set(), set())  # (outbound, at rest)
        self._enabled = True
        self._patterns_at_rest = True

    @property
    def enabled(self) -> bool:
        return self._enabled

    @enabled.setter
    def enabled(self, on: bool) -> None:
        self._enabled = on
        self._forget_clean()

    @property
    def patterns_at_rest(self) -> bool:
        """The high-confidence patterns at rest (the operator switch)."""
        return self._patterns_at_rest

    @patterns_at_rest.setter
    def patterns_at_rest(self, on: bool) -> None:
        self._patterns_at_rest = on
        self._forget_clean()

    def _forget_clean(self) -> None:
        self._clean = (set(), set())

    def add(self, value: str | None, name: str) -> None:
        if not value or len(value.strip()) < MIN_SECRET_LENGTH:
            return
        label = "[redacted:" + _LABEL.sub("_", name)[:64] + "]"
        with self._lock:
            new = {f: label for f in forms_of(value) if f not in self._labels}
            if new:
                self._labels.update(new)
                self._rebuild()

    def add_dynamic(self, value: str | None, name: str = "credential") -> None:
        """A value known at run time (a run's credential): kept with the last `DYNAMIC_CAP`."""
        if not value or len(value.strip()) < MIN_SECRET_LENGTH:
            return
        label = "[redacted:" + _LABEL.sub("_", name)[:64] + "]"
        with self._lock:
            if value in self._dynamic:
                self._dynamic.move_to_end(value)
                return
            self._dynamic[value] = {f: label for f in forms_of(value)}
            while len(self._dynamic) > DYNAMIC_CAP:
                self._dynamic.popitem(last=False)
            self._rebuild()

    def _rebuild(self) -> None:
        labels: dict[str, str] = {}
        for forms in self._dynamic.values():
            labels.update(forms)
        labels.update(self._labels)
        self._scanner = _Scanner(labels)
        self.generation += 1
        self._forget_clean()

    def add_env(self, environ: Mapping[str, str], extra_names: Iterable[str] = ()) -> None:
        extra = set(extra_names)
        for name, value in environ.items():
            if name in extra or SECRET_ENV_NAME.search(name):
                self.add(value, name)

    def __len__(self) -> int:
        return self._scanner.n_forms

    def _scan(self, text: str, *, at_rest: bool) -> str:
        """One pass: the known forms replaced, then each pattern tried at its anchors."""
        if not self.enabled or len(text) < 3:
            return text
        sc = self._scanner
        patterns = not at_rest or self.patterns_at_rest
        hits = sc.automaton.find_matches_as_indexes(text, overlapping=True)
        if not hits:
            return text
        n = sc.n_forms
        form_hits = [h for h in hits if h[0] < n]
        if form_hits:
            text = _splice(text, [(s, e, sc.labels[i]) for i, s, e in _leftmost_longest(form_hits)])
            if not patterns:
                return text
            anchors = [(_ANCHORS[i], s) for i, s, _ in _ANCHORS_ONLY.find_matches_as_indexes(text, overlapping=True)]
        elif not patterns:
            return text
        else:
            anchors = [(_ANCHORS[i - n], s) for i, s, _ in hits]
        return _apply_patterns(text, anchors, at_rest) if anchors else text

    def redact_text(self, text: str) -> str:
        """At rest: the known values and the high-confidence patterns."""
        if text in self._clean[1]:  # the hot path: an id, an owner, a name written many times a step
            return text
        return self._remembered(text, at_rest=True)

    def scrub_text(self, text: str) -> str:
        """The outbound scrub: the known values and every pattern."""
        if text in self._clean[0]:
            return text
        return self._remembered(text, at_rest=False)

    def _remembered(self, text: str, *, at_rest: bool) -> str:
        """`_scan`, remembering a short text found clean (the same ids, owners and names are
        written and sent many times a step) until the known values or the switches change."""
        clean = self._clean[at_rest]  # before the scan: a change meanwhile empties another set
        out = self._scan(text, at_rest=at_rest)
        if out == text and len(text) <= CLEAN_CACHE_TEXT_MAX:
            if len(clean) >= CLEAN_CACHE_SIZE:
                clean.clear()
            clean.add(text)
        return out


#: the process's secrets (the runtime fills it at open; a stored JSON value passes through it)
SECRETS = SecretValues()


def load_process_secrets(extra_env_names: Iterable[str] = (), enabled: bool = True,
                         patterns_at_rest: bool = True) -> SecretValues:
    SECRETS.enabled = enabled
    SECRETS.patterns_at_rest = patterns_at_rest
    SECRETS.add_env(os.environ, extra_env_names)
    return SECRETS


class RedactingFilter(logging.Filter):
    """Replaces known secret values in a log record's rendered message (install on handlers)."""

    def filter(self, record: logging.LogRecord) -> bool:
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
