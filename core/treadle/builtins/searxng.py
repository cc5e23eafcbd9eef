"""The `searxng` search driver: a SearXNG instance's JSON API, no key.

    GET {base_url}/search?q=<query>&format=json&pageno=<n>
    → {"query", "results": [{"url", "title", "content", ...}], "answers", "suggestions", ...}

Pages are read until `max_results` distinct URLs are found, a page adds nothing, or 10 pages.
The instance must allow the JSON format (`search: formats: [html, json]` in its settings.yml);
otherwise it answers 403, reported as such.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from treadle.builtins.http import fetch
from treadle.builtins.search import SearchFailed, SearchHit
from treadle.errors import ToolError
from treadle.security.network import HttpLimits, NetworkSetup

MAX_PAGES = 10
MAX_ANSWER_BYTES = 4 << 20


class SearxngSearch:
    name = "searxng"

    def __init__(self, base_url: str, timeout_s: float, network: NetworkSetup) -> None:
        self.base_url = base_url.rstrip("/")
        self.limits = HttpLimits(max_response_bytes=MAX_ANSWER_BYTES, timeout_s=timeout_s, max_redirects=2)
        self.network = network

    async def search(self, query: str, max_results: int, headers: Mapping[str, str] | None = None) -> list[SearchHit]:
        guard = self.network.operator_guard()
        hits: dict[str, SearchHit] = {}
        for page in range(1, MAX_PAGES + 1):
            url = f"{self.base_url}/search?" + urlencode({"q": query, "format": "json", "pageno": page})
            try:
                fetched = await fetch(guard, "GET", url, headers={**(headers or {}), "Accept": "application/json"},
                                      limits=self.limits)
            except ToolError as exc:
                raise SearchFailed(f"the search provider (searxng) is unreachable: {exc.message}") from None
            if fetched.status == 403:
                raise SearchFailed("the SearXNG instance refused format=json (403): list json in search.formats "
                                   "of its settings.yml")
            if fetched.status != 200:
                raise SearchFailed(f"the search provider (searxng) answered HTTP {fetched.status}")
            before = len(hits)
            for item in _results(fetched.body, fetched.truncated):
                hits.setdefault(item.url, item)
            if len(hits) >= max_results or len(hits) == before:
                break
        return list(hits.values())[:max_results]


def _results(body: bytes, truncated: bool) -> list[SearchHit]:
    if truncated:
        raise SearchFailed(f"the search provider's answer is larger than {MAX_ANSWER_BYTES} bytes")
    try:
        doc: Any = json.loads(body)
    except ValueError:
        raise SearchFailed("the search provider (searxng) did not answer JSON") from None
    results = doc.get("results") if isinstance(doc, dict) else None
    if not isinstance(results, list):
        raise SearchFailed("the search provider's answer has no results list")
    out: list[SearchHit] = []
    for r in results:
        if isinstance(r, dict) and isinstance(r.get("url"), str) and r["url"]:
            out.append(SearchHit(str(r.get("title") or ""), r["url"], str(r.get("content") or "")))
    return out
