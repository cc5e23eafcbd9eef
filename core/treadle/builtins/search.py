"""The search-provider port behind `WebSearch`, and the driver registry (yaml `search:`).

A provider answers `search(query, max_results)` with ranked hits. Its endpoint is the operator's
(never the agent's), so its requests use the guard's address rules without a host allowlist:
`NetworkSetup.operator_guard()` — a private or loopback endpoint needs
`TREADLE_HTTP_PRIVATE_HOST_ALLOWLIST`. Drivers: `searxng` (builtins/searxng.py), chosen by
`build_search_provider` in builtins/websearch.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from treadle.errors import ToolError


@dataclass(frozen=True, slots=True)
class SearchHit:
    title: str
    url: str
    snippet: str = ""


class SearchProvider(Protocol):
    name: str

    async def search(self, query: str, max_results: int, headers: Mapping[str, str] | None = None) -> list[SearchHit]:
        """Up to `max_results` hits, best first, `headers` sent with each request (the operator's
        `search.headers`, credentials resolved); ToolError (code websearch_failed) when the
        provider fails."""
        ...


class SearchFailed(ToolError):
    code = "websearch_failed"
