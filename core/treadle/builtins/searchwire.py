"""The keyed web-search drivers behind `search_providers:` — each speaks its vendor's wire, as
loomcycle's internal/search drivers do, and answers the normalized hits (title, url, snippet):

    brave   GET  https://api.search.brave.com/res/v1/web/search?q=&count=   X-Subscription-Token: KEY
            → {"web": {"results": [{"title", "url", "description"}]}}
    serper  POST https://google.serper.dev/search {"q", "num"}                X-API-KEY: KEY
            → {"organic": [{"title", "link", "snippet"}]}
    exa     POST https://api.exa.ai/search {"query", "numResults", "contents": {"text": {"maxCharacters": 300}}}
                                                                              x-api-key: KEY
            → {"results": [{"title", "url", "text", "highlights"}]}   (snippet: text, else the first highlight)
    tavily  POST https://api.tavily.com/search {"query", "max_results"}      Authorization: Bearer KEY
            → {"results": [{"title", "url", "content"}]}

A status other than 200 (a 429 rate limit included), an unreachable endpoint or an answer that
is not the vendor's JSON raise SearchFailed; the WebSearch circuit then falls over to the next
provider (builtins/searchcircuit.py). The key is sent only in its header and never appears in
an error (the vendor's error body is cut to 200 characters and scrubbed of the key).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from treadle.builtins.http import fetch
from treadle.builtins.search import SearchFailed, SearchHit
from treadle.errors import ToolError
from treadle.security.network import HttpLimits, NetworkSetup

MAX_ANSWER_BYTES = 1 << 20  # loomcycle's maxResponseBytes


@dataclass(frozen=True, slots=True)
class Wire:
    endpoint: str
    #: the env var (and credential name) of the key
    key_name: str
    method: str
    #: (query, n, key) → (url suffix, headers, JSON body or None)
    request: Callable[[str, int, str], tuple[str, dict[str, str], dict[str, Any] | None]]
    #: the parsed answer → hits
    hits: Callable[[Any], list[SearchHit]]


def _brave_request(q: str, n: int, key: str) -> tuple[str, dict[str, str], dict[str, Any] | None]:
    return "?" + urlencode({"q": q, "count": n}), {"Accept": "application/json", "X-Subscription-Token": key}, None


def _brave_hits(doc: Any) -> list[SearchHit]:
    return [_hit(r, "url", "description") for r in _list(_dict(doc).get("web"), "results")]


def _serper_request(q: str, n: int, key: str) -> tuple[str, dict[str, str], dict[str, Any] | None]:
    return "", {"X-API-KEY": key, "Content-Type": "application/json"}, {"q": q, "num": n}


def _serper_hits(doc: Any) -> list[SearchHit]:
    return [_hit(r, "link", "snippet") for r in _list(doc, "organic")]


def _exa_request(q: str, n: int, key: str) -> tuple[str, dict[str, str], dict[str, Any] | None]:
    body = {"query": q, "numResults": n, "contents": {"text": {"maxCharacters": 300}}}
    return "", {"x-api-key": key, "Content-Type": "application/json"}, body


def _exa_hits(doc: Any) -> list[SearchHit]:
    out = []
    for r in _list(doc, "results"):
        hit = _hit(r, "url", "text")
        highlights = r.get("highlights")
        if not hit.snippet.strip() and isinstance(highlights, list) and highlights and isinstance(highlights[0], str):
            hit = SearchHit(hit.title, hit.url, highlights[0].strip())
        out.append(SearchHit(hit.title, hit.url, hit.snippet.strip()))
    return out


def _tavily_request(q: str, n: int, key: str) -> tuple[str, dict[str, str], dict[str, Any] | None]:
    return "", {"Authorization": "Bearer " + key, "Content-Type": "application/json"}, {"query": q, "max_results": n}


def _tavily_hits(doc: Any) -> list[SearchHit]:
    return [_hit(r, "url", "content") for r in _list(doc, "results")]


WIRES: dict[str, Wire] = {
    "brave": Wire("https://api.search.brave.com/res/v1/web/search", "BRAVE_API_KEY", "GET", _brave_request,
                  _brave_hits),
    "serper": Wire("https://google.serper.dev/search", "SERPER_API_KEY", "POST", _serper_request, _serper_hits),
    "exa": Wire("https://api.exa.ai/search", "EXA_API_KEY", "POST", _exa_request, _exa_hits),
    "tavily": Wire("https://api.tavily.com/search", "TAVILY_API_KEY", "POST", _tavily_request, _tavily_hits),
}


class VendorSearch:
    """One keyed provider: its wire, at its endpoint (the vendor's, or `search_providers.<id>.base_url`)."""

    def __init__(self, name: str, endpoint: str | None, key: str, timeout_s: float, network: NetworkSetup) -> None:
        self.name = name
        self.wire = WIRES[name]
        self.endpoint = endpoint or self.wire.endpoint
        self.key = key
        self.limits = HttpLimits(max_response_bytes=MAX_ANSWER_BYTES, timeout_s=timeout_s, max_redirects=0)
        self.network = network

    async def search(self, query: str, max_results: int, headers: Mapping[str, str] | None = None) -> list[SearchHit]:
        suffix, wire_headers, body = self.wire.request(query, max_results, self.key)
        try:
            fetched = await fetch(self.network.operator_guard(), self.wire.method, self.endpoint + suffix,
                                  headers={**(headers or {}), **wire_headers},
                                  body=None if body is None else json.dumps(body).encode(), limits=self.limits)
        except ToolError as exc:
            raise SearchFailed(f"{self.name}: unreachable: {self._clean(exc.message)}") from None
        if fetched.status != 200:
            text = fetched.body[:200].decode("utf-8", "replace")
            raise SearchFailed(f"{self.name}: status {fetched.status}: {self._clean(text)}",
                               code="websearch_rate_limited" if fetched.status == 429 else "websearch_failed")
        if fetched.truncated:
            raise SearchFailed(f"{self.name}: the answer is larger than {MAX_ANSWER_BYTES} bytes")
        try:
            doc = json.loads(fetched.body)
        except ValueError:
            raise SearchFailed(f"{self.name}: parse: the answer is not JSON") from None
        return [h for h in self.wire.hits(doc) if h.url][:max_results]

    def _clean(self, text: str) -> str:
        return text.replace(self.key, "[redacted]") if self.key else text


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _list(doc: Any, field: str) -> list[dict[str, Any]]:
    items = _dict(doc).get(field)
    if not isinstance(items, list):
        return []
    return [r for r in items if isinstance(r, dict)]


def _hit(r: dict[str, Any], url: str, snippet: str) -> SearchHit:
    def text(v: Any) -> str:
        return v if isinstance(v, str) else ""

    return SearchHit(text(r.get("title")), text(r.get(url)), text(r.get(snippet)))
