"""Built-in `HTTP` (external): one HTTP request through the network guard (security/network.py).

Arguments as loomcycle's: `method` (GET, POST, PUT, PATCH, DELETE, HEAD; default GET), `url`,
`headers` ({name: value}), `body` (a string; an object or array is sent as JSON). The request
body and the response body are capped (yaml `http.max_request_bytes` / `max_response_bytes`,
256 KiB each), the whole exchange takes at most `http.timeout_seconds` (30 s), and at most
`http.max_redirects` (5) redirects are followed, each hop re-checked. The result is the text

    HTTP <method> <url> -> <status> <reason>
    <name>: <value>          (one line per response header)

    <body>
    [truncated at N bytes]   (when the body was cut)

A non-2xx status is an answer, not a tool error. Requests other than GET carry
`Idempotency-Key: <tool_use_id>` (stable across the re-runs of an external call) unless the agent
sets one. Which hosts the call may reach: the operator's `http.allowed_hosts` (and
`TREADLE_HTTP_ALLOWED_HOSTS`) ∩ the agent's `allowed_hosts` ∩ the run's `allowed_hosts`.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from treadle.builtins.args import refuse_unknown
from treadle.config import HttpConfig
from treadle.errors import ToolError
from treadle.security.network import Fetched, HttpLimits, NetworkGuard, NetworkSetup
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
#: headers the transport owns (framing, routing): an agent may not set them
RESERVED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "upgrade", "te",
                              "trailer", "keep-alive", "proxy-authorization", "proxy-connection"})


def http_limits(cfg: HttpConfig, *, response_bytes: int | None = None) -> HttpLimits:
    return HttpLimits(
        max_request_bytes=cfg.max_request_bytes,
        max_response_bytes=response_bytes or cfg.max_response_bytes,
        timeout_s=cfg.timeout_seconds,
        max_redirects=cfg.max_redirects,
    )


async def caller_allowed_hosts(ctx: ToolContext) -> list[str] | None:
    """The run's own `allowed_hosts` (POST /v1/runs, inherited by sub-agents): the caller's
    narrowing; None when the run has none."""
    return ctx.allowed_hosts


async def agent_guard(ctx: ToolContext, network: NetworkSetup) -> NetworkGuard:
    """The guard for a call of this run's agent: operator floor ∩ agent ∩ caller."""
    agent_hosts: Sequence[str] | None = getattr(ctx.agent_config, "allowed_hosts", None)
    return network.guard(ctx.services.config.http.allowed_hosts, agent_hosts, await caller_allowed_hosts(ctx))


async def fetch(
    guard: NetworkGuard, method: str, url: str, *, headers: dict[str, str] | None = None, body: bytes | None = None,
    limits: HttpLimits,
) -> Fetched:
    """One request through the guard (security/egress.py, imported here: httpx stays out of cold starts)."""
    from treadle.security.egress import request

    return await request(guard, method, url, headers=headers, body=body, limits=limits)


def decode_body(data: bytes, charset: str | None, truncated: bool) -> str:
    """Text of a (possibly cut) body: a character split by the cut is dropped, not mangled."""
    try:
        decoder = codecs.getincrementaldecoder(charset or "utf-8")(errors="replace")
    except LookupError:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    return str(decoder.decode(data, final=not truncated))


def truncation_marker(cap: int) -> str:
    return f"\n[truncated at {cap} bytes]"


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    url: str
    headers: dict[str, str]
    body: bytes | None


def parse_request(args: dict[str, Any], schema: dict[str, Any], limits: HttpLimits) -> HttpRequest:
    refuse_unknown(args, schema, "HTTP")
    method = args.get("method", "GET")
    if not isinstance(method, str) or method.upper() not in METHODS:
        raise ToolError(f"HTTP: method must be one of {', '.join(METHODS)}", code="bad_request")
    method = method.upper()
    url = args.get("url")
    if not isinstance(url, str) or not url.strip():
        raise ToolError("HTTP: url is required (an http or https URL)", code="bad_request")
    raw_headers = args.get("headers") or {}
    if not isinstance(raw_headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str | int | float) and not isinstance(v, bool)
        for k, v in raw_headers.items()
    ):
        raise ToolError("HTTP: headers must be an object of header names to string values", code="bad_request")
    headers = {k: str(v) for k, v in raw_headers.items()}
    reserved = sorted(k for k in headers if k.lower() in RESERVED_HEADERS)
    if reserved:
        raise ToolError(f"HTTP: header(s) {', '.join(reserved)} are set by the transport, not by the agent",
                        code="bad_request")
    body = _body(args.get("body"), headers)
    if body is not None and method in ("GET", "HEAD"):
        raise ToolError(f"HTTP: a {method} request takes no body", code="bad_request")
    if body is not None and len(body) > limits.max_request_bytes:
        raise ToolError(f"HTTP: the request body is {len(body)} bytes; the limit is {limits.max_request_bytes}",
                        code="request_too_large")
    return HttpRequest(method, url.strip(), headers, body)


def _body(value: Any, headers: dict[str, str]) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, dict | list):
        if not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = "application/json"
        return json.dumps(value, separators=(",", ":")).encode("utf-8")
    raise ToolError("HTTP: body must be a string (or an object/array, sent as JSON)", code="bad_request")


def format_response(fetched: Fetched, cap: int) -> str:
    head = f"HTTP {fetched.method} {fetched.url} -> {fetched.status} {fetched.reason}".rstrip()
    lines = [head, *(f"{k}: {v}" for k, v in fetched.headers), ""]
    text = "\n".join(lines) + "\n" + decode_body(fetched.body, fetched.charset, fetched.truncated)
    return text + (truncation_marker(cap) if fetched.truncated else "")


class HttpTool:
    name = "HTTP"
    effects: ToolEffects = "external"  # reaches outside the database; the call may repeat in its step's window
    description = (
        "Make one HTTP request. method: GET|POST|PUT|PATCH|DELETE|HEAD (default GET); url (http/https); headers "
        "{name: value}; body (string, or an object/array sent as JSON). Returns 'HTTP <method> <url> -> <status>', "
        "the response headers, a blank line and the body (cut at the size limit, marked '[truncated at N bytes]'). "
        "Only hosts allowed for this agent and run are reachable; private and internal addresses never are. "
        "Redirects are followed (at most 5)."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "method": {"type": "string", "enum": list(METHODS)},
            "url": {"type": "string", "description": "an http or https URL"},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "body": {"description": "request body: a string, or an object/array sent as JSON",
                     "type": ["string", "object", "array"]},
        },
        "required": ["url"],
    }

    def __init__(self, network: NetworkSetup | None = None) -> None:
        self.network = network or NetworkSetup()

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        limits = http_limits(ctx.services.config.http)
        req = parse_request(args, self.input_schema, limits)
        headers = dict(req.headers)
        if req.method != "GET" and not any(k.lower() == "idempotency-key" for k in headers):
            headers["Idempotency-Key"] = ctx.tool_use_id
        guard = await agent_guard(ctx, self.network)
        try:
            fetched = await fetch(guard, req.method, req.url, headers=headers, body=req.body, limits=limits)
        except ToolError as exc:
            raise ToolError(f"HTTP {req.method} {req.url}: {exc.message}", code=exc.code) from None
        return ToolResult(format_response(fetched, limits.max_response_bytes))
