"""loomcycle's `model_pattern` (RFC BG): a model alias or tier candidate names a glob instead of a
model, resolved when it is called to the newest model its provider lists (loomcycle's modelver:
the ids' runs of digits compared as integers, an Ollama `:tag` ignored; a bare stem vs a dated
snapshot of the same version: the dated one is newer, except on Anthropic, whose bare major is
its rolling alias). A pattern nothing listed matches is a model the provider does not serve
(UnknownModel: the route's next candidate takes over, as loomcycle skips such a candidate).

The config keeps the pattern as the candidate's model, `PREFIX` + glob (config.ModelRef); the
provider's list is read once per TTL per provider instance."""

from __future__ import annotations

import fnmatch
import re
import time
from typing import Any

from treadle.errors import ProviderError, UnknownModel

PREFIX = "pattern:"
LIST_TTL_S = 900.0  # loomcycle's probe interval
_DIGITS = re.compile(r"\d+")


def is_pattern(model: str) -> bool:
    return model.startswith(PREFIX)


def _vector(model_id: str) -> list[int]:
    return [int(d) for d in _DIGITS.findall(model_id.split(":", 1)[0])]


def newest(ids: list[str], bare_is_newer: bool = False) -> str | None:
    """The newest of `ids` by loomcycle's modelver rule; None when none, or when several digit-less
    ids cannot be ordered (narrow the glob, as loomcycle says)."""
    if not ids:
        return None
    if len(ids) == 1:
        return ids[0]
    best = ids[0]
    for cand in ids[1:]:
        c = compare(cand, best, bare_is_newer)
        if c > 0 or (c == 0 and cand > best):
            best = cand
    return best if _vector(best) else None


def compare(a: str, b: str, bare_is_newer: bool = False) -> int:
    va, vb = _vector(a), _vector(b)
    for x, y in zip(va, vb, strict=False):
        if x != y:
            return -1 if x < y else 1
    if len(va) == len(vb):
        return 0
    shorter_is_a = len(va) < len(vb)
    if (va if shorter_is_a else vb) == []:
        return -1 if shorter_is_a else 1  # a digit-less stem ranks below a versioned id
    bare_wins = 1 if bare_is_newer else -1
    return bare_wins if shorter_is_a else -bare_wins


class PatternResolver:
    """Per provider instance: its listed models (cached `LIST_TTL_S`) and the pattern's pick."""

    def __init__(self) -> None:
        self._listed: dict[int, tuple[float, list[str]]] = {}

    async def resolve(self, provider: Any, provider_id: str, model: str) -> str:
        glob = model[len(PREFIX):]
        lister = getattr(provider, "list_models", None)
        if lister is None:
            raise UnknownModel(f"{provider_id}: model_pattern {glob!r} needs a provider that lists its models")
        cached = self._listed.get(id(provider))
        if cached is None or time.monotonic() - cached[0] > LIST_TTL_S:
            try:
                cached = (time.monotonic(), list(await lister(5.0)))
            except ProviderError as exc:
                raise UnknownModel(f"{provider_id}: model_pattern {glob!r}: its models could not be listed "
                                   f"({exc.message})") from None
            self._listed[id(provider)] = cached
        matches = [m for m in cached[1] if fnmatch.fnmatchcase(m, glob)]
        pick = newest(matches, bare_is_newer=getattr(provider, "driver", "") == "anthropic")
        if pick is None:
            raise UnknownModel(f"{provider_id}: no listed model matches model_pattern {glob!r}"
                               + (f" unambiguously ({', '.join(sorted(matches))})" if matches else ""))
        return pick


RESOLVER = PatternResolver()
