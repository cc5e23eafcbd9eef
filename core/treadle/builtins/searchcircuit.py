"""loomcycle's WebSearch fallback circuit (RFC BB) over `search_providers:` / `search_priority:`.

The cascade is the agent's `search_providers` when it has one (a full replacement), else
`search_priority`, else the enabled ids sorted. Walking it, a provider is skipped when it is in
a failure cooldown (60 s after a failed call, per process — loomcycle's last-outcome availability;
the cloud shape: per function environment) or when it has no key: brave, serper, exa and tavily
take theirs from a CredentialDef of the env-var name (BRAVE_API_KEY, …) held by the run's agent,
user or tenant — the value joins the redaction set — else from the operator's environment
variable of that name; searxng needs none. A provider that fails (a 429 rate limit, another
status, an unreachable endpoint, an answer not in its wire) is cooled down and the next one
tried; one that answers no results passes the query on too. With no `search_providers:` and no
`search:`, loomcycle's back-compat applies: Brave alone when BRAVE_API_KEY is set.

Errors (ToolError): `websearch_not_configured` when no provider could be tried (none enabled,
or none keyed), `websearch_failed` when every one tried failed (the last error named).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from treadle.builtins.search import SearchHit, SearchProvider
from treadle.builtins.searchwire import WIRES, VendorSearch
from treadle.config import SearchProviderEntry, TreadleConfig
from treadle.errors import ToolError
from treadle.security.network import NetworkSetup
from treadle.tools.base import ToolContext

COOLDOWN_S = 60.0  # loomcycle's search.DefaultCooldown
TIMEOUT_S = 15.0  # loomcycle's per-attempt default


@dataclass
class Cooldowns:
    """Per-process last-outcome availability: a failed provider is skipped until its cooldown ends."""

    clock: Callable[[], float] = time.monotonic
    until: dict[str, tuple[float, str]] = field(default_factory=dict)

    def available(self, pid: str) -> bool:
        entry = self.until.get(pid)
        return entry is None or self.clock() >= entry[0]

    def mark(self, pid: str, error: str | None) -> None:
        if error is None:
            self.until.pop(pid, None)
        else:
            self.until[pid] = (self.clock() + COOLDOWN_S, error)


@dataclass(slots=True)
class Answer:
    provider: str
    hits: list[SearchHit]
    #: the providers tried before it that failed or found nothing (loomcycle's "fell over")
    fell_over: list[str]


def enabled_providers(cfg: TreadleConfig, env: Mapping[str, str]) -> dict[str, SearchProviderEntry]:
    """The catalog: `search_providers:`, else Brave alone when BRAVE_API_KEY is set and there is
    no `search:` (loomcycle's back-compat)."""
    if cfg.search_providers:
        return {str(pid): entry for pid, entry in cfg.search_providers.items()}
    if cfg.raw_search is None and env.get("BRAVE_API_KEY"):
        return {"brave": SearchProviderEntry()}
    return {}


def cascade(cfg: TreadleConfig, agent_list: list[str], enabled: Mapping[str, Any]) -> list[str]:
    if agent_list:
        return [p for p in agent_list if p in enabled]
    return [p for p in cfg.search_priority if p in enabled] or sorted(enabled)


async def circuit_search(
    ctx: ToolContext, network: NetworkSetup, cooldowns: Cooldowns, query: str, max_results: int,
) -> Answer:
    cfg = ctx.services.config
    env = network.env if network.env is not None else os.environ
    enabled = enabled_providers(cfg, env)
    order = cascade(cfg, list(getattr(ctx.agent_config, "search_providers", []) or []), enabled)
    keys = await _keys(ctx, [WIRES[p].key_name for p in order if p in WIRES], env)
    fell_over: list[str] = []
    attempted, last_error, last_code = 0, "", "websearch_failed"
    for pid in order:
        if not cooldowns.available(pid):
            continue
        provider: SearchProvider
        if pid == "searxng":
            from treadle.builtins.searxng import SearxngSearch

            provider = SearxngSearch(str(enabled[pid].base_url), TIMEOUT_S, network)
        else:
            key = keys.get(WIRES[pid].key_name, "")
            if not key:
                continue  # not keyable: no cooldown (not the provider's failure)
            base = enabled[pid].base_url
            provider = VendorSearch(pid, None if base is None else str(base), key, TIMEOUT_S, network)
        attempted += 1
        try:
            hits = await provider.search(query, max_results)
        except ToolError as exc:
            cooldowns.mark(pid, exc.message)
            fell_over.append(pid)
            last_error, last_code = exc.message, exc.code
            continue
        cooldowns.mark(pid, None)
        if hits:
            return Answer(pid, hits, fell_over)
        fell_over.append(pid)
    if attempted == 0:
        raise ToolError("WebSearch: no keyable search provider is available; configure a search provider "
                        "(search_providers/search_priority) and its API key", code="websearch_not_configured")
    if last_error:
        raise ToolError(f"WebSearch: all providers failed; last error: {last_error}",
                        code="websearch_rate_limited" if last_code == "websearch_rate_limited" else "websearch_failed")
    return Answer(fell_over[-1], [], fell_over[:-1])


async def _keys(ctx: ToolContext, names: list[str], env: Mapping[str, str]) -> dict[str, str]:
    """Each key name's value: the run's CredentialDef of that name, else the operator's env var."""
    if not names:
        return {}
    from treadle.governance.credentials import TenantCredentials
    from treadle.security.redact import SECRETS

    held = await TenantCredentials(ctx.services.runs.pool).resolve_for_run(ctx.tenant_id, ctx.run_id, names)
    out = {n: held.get(n) or env.get(n, "") for n in names}
    for n, v in out.items():
        if v and n not in held:
            SECRETS.add_dynamic(v, n)
    return out
