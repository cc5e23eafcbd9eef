#!/usr/bin/env python
"""Secret scrub benchmark: the cost per tool result of treadle's redaction (security/redact.py),
the old regex path against the Aho-Corasick pass, in the same run on the same texts.

What a tool result costs: it is redacted at rest (its event's JSON text, `redact_text` via
store/db.py `dumps_jsonb`) and scrubbed once outbound (`scrub_text` via engine/scrub.py; the replay
state remembers closed messages, so each result is scrubbed once along a run). Both are timed, and
their sum per result is the figure issue 32 asks for (≤ 0.5 ms for 20 KB).

Texts (20 KB unless told): `prose` (JSON search results: no candidate at all), `code` (Python
source: many pattern anchors such as `token`, few matches), `secrets` (prose with 5 known values and
5 secret-shaped strings in it). Known values: 6 provider keys (each in ~12 encoded forms).

The old path is the code of security/redact.py before this change, kept here verbatim so the
table compares the two in one process under the same load (CPU on a shared machine drifts).

    .venv/bin/python scripts/bench_scrub.py [--size 20000] [--rounds 200]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import string
import time
from collections.abc import Callable
from pathlib import Path

from treadle.security.redact import SecretValues, forms_of

# --- the old path (security/redact.py before the Aho-Corasick pass), verbatim -------------------
_OLD_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?i)(authorization\s*[:=]\s*(?:bearer|token|basic)\s+)[^\s\"',;]+"), r"\1[redacted]"),
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"), "[redacted-key]"),
    (re.compile(r"\b(?:ghp|gho|ghs|ghu|ghr)_[A-Za-z0-9]{36,}"), "[redacted-token]"),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}"), "[redacted-token]"),
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), "[redacted-aws-key]"),
    (re.compile(r"\bxox[baprs]-[A-Za-z0-9\-]{10,}"), "[redacted-slack]"),
    (re.compile(r"(?i)\b((?:api[_-]?key|secret|token|password|passwd)\s*[:=]\s*)[\"']?[^\s\"',;&]{6,}"),
     r"\1[redacted]"),
)
_OLD_ANY = re.compile("|".join(
    f"(?i:{p.pattern[4:]})" if p.pattern.startswith("(?i)") else f"(?:{p.pattern})" for p, _ in _OLD_PATTERNS))


class OldSecretValues:
    def __init__(self) -> None:
        self._labels: dict[str, str] = {}
        self._pattern: re.Pattern[str] | None = None

    def add(self, value: str, name: str) -> None:
        for form in forms_of(value):
            self._labels.setdefault(form, f"[redacted:{name}]")
        self._pattern = re.compile("|".join(map(re.escape, sorted(self._labels, key=len, reverse=True))))

    def redact_text(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(lambda m: self._labels[m.group(0)], text)

    def scrub_text(self, text: str) -> str:
        text = self.redact_text(text)
        if not _OLD_ANY.search(text):
            return text
        for pattern, replacement in _OLD_PATTERNS:
            text = pattern.sub(replacement, text)
        return text
# -------------------------------------------------------------------------------------------------


def texts(size: int, keys: list[str]) -> dict[str, str]:
    prose = json.dumps([{"id": i, "title": f"result {i} about the weather in Paris",
                         "body": "lorem ipsum dolor sit amet, consectetur adipiscing elit " * 4}
                        for i in range(size // 100 + 1)])[:size]
    source = Path(__file__).resolve().parents[1] / "core" / "treadle" / "engine" / "step.py"
    code = (source.read_text() * (size // 1000 + 1))[:size]
    rng = random.Random(7)
    shaped = ["Authorization: Bearer " + "".join(rng.choices(string.ascii_letters, k=32)),
              "ghp_" + "".join(rng.choices(string.ascii_letters, k=36)), "password=hunter2hunter2",
              "AKIA" + "".join(rng.choices(string.ascii_uppercase, k=16)), "sk-proj-" + "x" * 30]
    chunk = size // 11
    secrets = "".join(prose[i * chunk:(i + 1) * chunk] + " " + s + " "
                      for i, s in enumerate([*keys[:5], *shaped]))[:size]
    return {"prose": prose, "code": code, "secrets": secrets}


def timed(fn: Callable[[str], str], text: str, rounds: int) -> float:
    fn(text)
    start = time.process_time()
    for _ in range(rounds):
        fn(text)
    return (time.process_time() - start) / rounds * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()
    rng = random.Random(1)
    keys = ["sk-ant-api03-" + "".join(rng.choices(string.ascii_letters + string.digits, k=40)) for _ in range(6)]
    new, old = SecretValues(), OldSecretValues()
    for i, k in enumerate(keys):
        new.add(k, f"K{i}_API_KEY")
        old.add(k, f"K{i}_API_KEY")
    print(f"secret scrub, {args.size} B per text, {len(new)} known forms, CPU ms per call (process time)")
    print(f"{'text':<9}{'path':<6}{'at rest':>10}{'outbound':>10}{'per result':>12}")
    for name, text in texts(args.size, keys).items():
        rest_text = json.dumps(text)  # at rest the event's JSON text is redacted
        for path, sv in (("old", old), ("new", new)):
            rest = timed(sv.redact_text, rest_text, args.rounds)
            out = timed(sv.scrub_text, text, args.rounds)
            print(f"{name:<9}{path:<6}{rest:>10.3f}{out:>10.3f}{rest + out:>12.3f}")


if __name__ == "__main__":
    main()
