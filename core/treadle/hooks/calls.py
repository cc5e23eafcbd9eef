"""Calling the tool-use hooks registered with `POST /v1/hooks` around every tool call.

- `pre` hooks (in registration order) see `{phase, hook_id, tenant_id, run_id, agent, tool,
  tool_use_id, input}` and answer `{"decision": "allow"}` (optionally with `"input": {...}`, the
  rewritten input) or `{"decision": "deny", "reason": "..."}` — the call does not run and the
  model reads the reason as the call's error result. A parked call woken again is not re-checked.
- `post` hooks see the same plus `result: {content, is_error}` and may answer `{"result": {...}}`
  to rewrite it (`{}` keeps it).
- Each request is signed: `X-Treadle-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret,
  "<t>.<body>")>` with the secret from the hook's `secret_env` (else `TREADLE_HOOKS_SECRET`), or
  the value of the tenant credential `secret_credential` names, so the receiver can check it came
  from treadle and is fresh. The hook's `headers` go with it, each `${credential.NAME}` in them
  resolved for the calling run (governance/credentials.py: the run's agent's, user's or tenant's
  CredentialDef; a header whose credential does not resolve is left out, never sent literally).
- A hook that fails (refused address, timeout, non-2xx, bad JSON, missing secret) is skipped when
  its `fail_mode` is `open`; with `closed` the call is denied (pre) or its result becomes an error
  (post).
- The callback URL goes through the network guard as an operator endpoint: any host, but
  loopback/private/metadata addresses only for hosts in `TREADLE_HTTP_PRIVATE_HOST_ALLOWLIST`.

Hooks are read per tenant and cached for `CACHE_S` seconds (a change made through another
replica takes effect within that time).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import time
from typing import Any

from treadle.errors import TreadleError
from treadle.security.network import HttpLimits, NetworkSetup
from treadle.store.hooks import HookRecord, HookStore
from treadle.tools.base import PreHookVerdict, ToolContext, ToolResult

log = logging.getLogger("treadle.hooks")

CACHE_S = 2.0
DEFAULT_SECRET_ENV = "TREADLE_HOOKS_SECRET"
MAX_HOOK_RESPONSE_BYTES = 256 * 1024


class HookFailed(Exception):
    pass


def signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


class HttpToolHooks:
    def __init__(self, store: HookStore, network: NetworkSetup | None = None) -> None:
        self.store = store
        self.network = network or NetworkSetup()
        self._cache: dict[str, tuple[float, list[HookRecord]]] = {}

    def forget(self, tenant_id: str) -> None:
        self._cache.pop(tenant_id, None)

    async def _hooks(self, tenant_id: str, phase: str, agent: str, tool: str) -> list[HookRecord]:
        cached = self._cache.get(tenant_id)
        if cached is None or time.monotonic() - cached[0] > CACHE_S:
            cached = (time.monotonic(), await self.store.list(tenant_id))
            self._cache[tenant_id] = cached
        return [h for h in cached[1] if h.phase == phase and h.matches(agent, tool)]

    async def pre(self, ctx: ToolContext, tool: str, args: dict[str, Any]) -> PreHookVerdict:
        if ctx.resume is not None:
            return PreHookVerdict(args)
        for hook in await self._hooks(ctx.tenant_id, "pre", ctx.agent, tool):
            try:
                answer = await self._call(hook, ctx, tool, {"input": args})
            except HookFailed as exc:
                if hook.fail_mode == "closed":
                    return PreHookVerdict(args, ToolResult(f"{tool}: denied — hook {hook.name!r} failed: {exc}",
                                                           is_error=True))
                log.warning("pre hook %s failed (fail-open): %s", hook.id, exc)
                continue
            if answer.get("decision") == "deny":
                reason = str(answer.get("reason") or f"denied by hook {hook.name!r}")
                return PreHookVerdict(args, ToolResult(f"{tool}: {reason}", is_error=True))
            rewritten = answer.get("input")
            if isinstance(rewritten, dict):
                args = rewritten
        return PreHookVerdict(args)

    async def has_post(self, ctx: ToolContext, tool: str) -> bool:
        return bool(await self._hooks(ctx.tenant_id, "post", ctx.agent, tool))

    async def post(self, ctx: ToolContext, tool: str, args: dict[str, Any], result: ToolResult) -> ToolResult:
        for hook in await self._hooks(ctx.tenant_id, "post", ctx.agent, tool):
            shown = {"content": result.content, "is_error": result.is_error}
            try:
                answer = await self._call(hook, ctx, tool, {"input": args, "result": shown})
            except HookFailed as exc:
                if hook.fail_mode == "closed":
                    return ToolResult(f"{tool}: result withheld — hook {hook.name!r} failed: {exc}", is_error=True)
                log.warning("post hook %s failed (fail-open): %s", hook.id, exc)
                continue
            new = answer.get("result")
            if isinstance(new, dict) and isinstance(new.get("content"), str):
                result = ToolResult(new["content"], is_error=bool(new.get("is_error", False)), events=result.events)
        return result

    async def _credentials(self, hook: HookRecord, ctx: ToolContext) -> tuple[str, dict[str, str]]:
        """The signing secret (the hook's credential's value, else its variable's) and its headers."""
        from treadle.governance.credentials import TenantCredentials, refs, substitute_headers

        names = refs(hook.headers.values()) | ({hook.secret_credential} if hook.secret_credential else set())
        resolved: dict[str, str] = {}
        if names:
            try:
                resolved = await TenantCredentials(self.store.pool).resolve_for_run(ctx.tenant_id, ctx.run_id, names)
            except TreadleError as exc:
                raise HookFailed(exc.message) from None
        if hook.secret_credential:
            secret = resolved.get(hook.secret_credential)
            if not secret:
                raise HookFailed(f"its signing credential {hook.secret_credential!r} is not set for this run")
        else:
            secret = os.environ.get(hook.secret_env or DEFAULT_SECRET_ENV)
            if not secret:
                raise HookFailed(f"its signing secret ({hook.secret_env or DEFAULT_SECRET_ENV}) is not set")
        return secret, substitute_headers(hook.headers, resolved)

    async def _call(self, hook: HookRecord, ctx: ToolContext, tool: str, extra: dict[str, Any]) -> dict[str, Any]:
        secret, extra_headers = await self._credentials(hook, ctx)
        body = json.dumps({"phase": hook.phase, "hook_id": hook.id, "tenant_id": ctx.tenant_id, "run_id": ctx.run_id,
                           "agent": ctx.agent, "tool": tool, "tool_use_id": ctx.tool_use_id, **extra},
                          separators=(",", ":"), sort_keys=True).encode()
        headers = {**extra_headers, "Content-Type": "application/json", "X-Treadle-Hook-Id": hook.id,
                   "X-Treadle-Signature": signature(secret, int(time.time()), body)}
        limits = HttpLimits(max_response_bytes=MAX_HOOK_RESPONSE_BYTES, timeout_s=hook.timeout_ms / 1000,
                            max_redirects=0)
        from treadle.security import egress  # httpx: imported with the first hook call, not at start

        try:
            fetched = await egress.request(self.network.operator_guard(), "POST", hook.callback_url, headers=headers,
                                           body=body, limits=limits)
        except TreadleError as exc:
            raise HookFailed(exc.message) from None
        if not 200 <= fetched.status < 300:
            raise HookFailed(f"HTTP {fetched.status}")
        if fetched.truncated:
            raise HookFailed("its response is too large")
        try:
            answer = json.loads(fetched.body or b"{}")
        except ValueError:
            raise HookFailed("its response is not JSON") from None
        if not isinstance(answer, dict):
            raise HookFailed("its response is not a JSON object")
        return answer
