"""Built-in `WebSearch` (external): search the web through the operator's search provider (yaml
`search:`, builtins/search.py; its `headers` may name tenant credentials), or loomcycle's catalog
with fallback (`search_providers:` + `search_priority:`, builtins/searchcircuit.py). Arguments
`query` and `max_results` (1..100, default 10); the result is JSON `{"query", "results": [{"title",
"url", "snippet"}]}`, from the catalog with `provider` (who answered) and `fell_over` (who was
tried first). With neither every call fails with `websearch_not_configured`.
"""

from __future__ import annotations

import os
from typing import Any

from treadle.builtins.args import refuse_unknown
from treadle.builtins.search import SearchProvider
from treadle.config import SearchConfig
from treadle.errors import ToolError
from treadle.security.network import NetworkSetup
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult

DEFAULT_RESULTS = 10
MAX_RESULTS = 100
MAX_QUERY_CHARS = 2000


def build_search_provider(cfg: SearchConfig, network: NetworkSetup) -> SearchProvider:
    """The driver yaml `search.driver` names."""
    if cfg.driver == "searxng":
        from treadle.builtins.searxng import SearxngSearch

        return SearxngSearch(cfg.base_url, cfg.timeout_seconds, network)
    raise ToolError(f"WebSearch: unknown search driver {cfg.driver!r}", code="websearch_not_configured")


async def search_headers(ctx: ToolContext, cfg: SearchConfig) -> dict[str, str]:
    """`search.headers` for this call: each `${credential.NAME}` the run's agent, user or tenant
    holds (governance/credentials.py: the value joins the redaction set), a header naming one it
    lacks left out."""
    from treadle.governance.credentials import TenantCredentials, refs, substitute_headers

    names = refs(cfg.headers.values())
    resolved = await TenantCredentials(ctx.services.runs.pool).resolve_for_run(ctx.tenant_id, ctx.run_id, names) \
        if names else {}
    return substitute_headers(cfg.headers, resolved)


class WebSearchTool:
    name = "WebSearch"
    effects: ToolEffects = "external"
    description = (
        "Search the web. query: what to look for; max_results: 1..100 (default 10). Returns JSON "
        "{query, results: [{title, url, snippet}]}, best first. Read a result with WebFetch."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS},
        },
        "required": ["query"],
    }

    def __init__(self, network: NetworkSetup | None = None) -> None:
        from treadle.builtins.searchcircuit import Cooldowns

        self.network = network or NetworkSetup()
        self.cooldowns = Cooldowns()

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        refuse_unknown(args, self.input_schema, "WebSearch")
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("WebSearch: query is required", code="bad_request")
        if len(query) > MAX_QUERY_CHARS:
            raise ToolError(f"WebSearch: query is longer than {MAX_QUERY_CHARS} characters", code="bad_request")
        n = args.get("max_results", DEFAULT_RESULTS)
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_RESULTS:
            raise ToolError(f"WebSearch: max_results must be an integer from 1 to {MAX_RESULTS}", code="bad_request")
        if ctx.services.config.search is None:
            from treadle.builtins.searchcircuit import circuit_search, enabled_providers

            env = self.network.env if self.network.env is not None else os.environ
            if enabled_providers(ctx.services.config, env):
                answer = await circuit_search(ctx, self.network, self.cooldowns, query.strip(), n)
                return ToolResult.json({
                    "query": query.strip(), "provider": answer.provider,
                    **({"fell_over": answer.fell_over} if answer.fell_over else {}),
                    "results": [{"title": h.title, "url": h.url, "snippet": h.snippet} for h in answer.hits]})
        cfg = ctx.services.config.search
        if cfg is None:
            raise ToolError(
                "WebSearch: websearch_not_configured — no search provider is configured "
                "(treadle.yaml: search: {driver: searxng, base_url: ...}, or loomcycle's search_providers: "
                "brave | serper | exa | tavily | searxng with search_priority)",
                code="websearch_not_configured",
            )
        provider = build_search_provider(cfg, self.network)
        try:
            hits = await provider.search(query.strip(), n, await search_headers(ctx, cfg))
        except ToolError as exc:
            raise ToolError(f"WebSearch: {exc.message}", code=exc.code) from None
        return ToolResult.json({"query": query.strip(),
                                "results": [{"title": h.title, "url": h.url, "snippet": h.snippet} for h in hits]})
