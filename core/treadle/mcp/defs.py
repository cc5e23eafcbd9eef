"""MCPServerDef: MCP servers created at runtime, on the shared def lifecycle (treadle/defs).

    {"op": "create", "name": "github", "overlay": {"transport": "http", "url": "https://…/mcp",
     "headers": {"Authorization": "Bearer ${run.credentials.github}"}, "description": "…"},
     "discover": true}

`create` (and `fork`) lists the server's tools unless `discover` is false, and records them in the
body: the body — where the server is and which tools it offers — is what the content hash covers,
so a run is pinned to what was discovered, and a step never has to list the tools again. Listing
goes through the network guard with the operator's floor; headers that need a run credential are
left out. `rediscover` lists them again and records a new, promoted version when they changed.
stdio servers are declared in treadle.yaml only (a def would let a caller start a process)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from treadle.defs.args import parse_spec
from treadle.defs.gates import Gate, require_scopes
from treadle.defs.lifecycle import DefLifecycle
from treadle.domain.defs import content_sha256
from treadle.errors import DefRefused, ToolError
from treadle.specs.mcp import SERVER_NAME, McpServerSpec
from treadle.store.defs import DefStore

#: (server name, spec) → the tools the server lists, as stored ({name, description, input_schema})
Discoverer = Callable[[str, McpServerSpec], Awaitable[list[dict[str, Any]]]]


class McpServerDefs(DefLifecycle):
    kind = "mcp_server"
    label = "MCPServerDef"
    create_promotes = True
    fork_promotes = True
    extra_ops = ("rediscover",)

    def __init__(self, defs: DefStore, discover: Discoverer, yaml_names: list[str]) -> None:
        super().__init__(defs)
        self.discover = discover
        self.yaml_names = set(yaml_names)

    async def normalize(self, tenant: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        if not SERVER_NAME.match(name) or len(name) > 64:
            raise DefRefused(f"{self.label}: name must match [A-Za-z0-9_-]{{1,64}} without '__'")
        if name in self.yaml_names:
            raise DefRefused(f"{self.label}: {name!r} is declared in treadle.yaml (mcp_servers)")
        fields = {k: v for k, v in body.items() if k != "tools"}
        spec = parse_spec(self.label, McpServerSpec, fields)
        if spec.is_stdio:
            raise DefRefused(f"{self.label}: transport stdio is for treadle.yaml's mcp_servers only")
        out: dict[str, Any] = spec.model_dump(exclude={"command", "args", "env"}, exclude_defaults=True)
        out["transport"] = "http"  # streamable-http is loomcycle's other spelling
        tools = body.get("tools")
        if tools is None:
            try:
                tools = await self.discover(name, spec)
            except ToolError as exc:
                raise DefRefused(f"{self.label}: cannot list the tools of {spec.url}: {exc.message} "
                                 "(pass discover: false to record the server without them)") from None
        if not isinstance(tools, list) or not all(isinstance(t, dict) and isinstance(t.get("name"), str)
                                                  for t in tools):
            raise DefRefused(f"{self.label}: tools must be a list of {{name, description, input_schema}}")
        out["tools"] = tools
        return out

    def content_hash(self, body: dict[str, Any]) -> str:
        return content_sha256(body)

    async def op_create(
        self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None
    ) -> dict[str, Any]:
        return await super().op_create(tenant, self._discover_arg(args, "create"), gate, run_id)

    async def op_fork(
        self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None
    ) -> dict[str, Any]:
        args = self._discover_arg(args, "fork")
        given = args.get("overlay")
        overlay: dict[str, Any] = given if isinstance(given, dict) else {}
        if args.get("discover", True) and "tools" not in overlay:
            # a fork that changes where the server is lists it again (the parent's tools would be stale)
            args = {**args, "overlay": {**overlay, "tools": None}}
        return await super().op_fork(tenant, args, gate, run_id)

    def _discover_arg(self, args: dict[str, Any], op: str) -> dict[str, Any]:
        discover = args.get("discover", True)
        if not isinstance(discover, bool):
            raise DefRefused(f"{self.what(op)}: discover must be a boolean")
        if not discover:
            given = args.get("overlay")
            overlay: dict[str, Any] = given if isinstance(given, dict) else {}
            return {**args, "overlay": {**overlay, "tools": overlay.get("tools") or []}}
        return args

    async def op_rediscover(
        self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None
    ) -> dict[str, Any]:
        what = self.what("rediscover")
        if gate is not None:
            require_scopes(gate, what)
        current = await self.resolve(tenant, args, static_ok=False)
        self.check_gate(gate, current.name, current.body, what)
        fields = {k: v for k, v in current.body.items() if k != "tools"}
        body = await self.normalize(tenant, current.name, fields)
        if body == current.body:
            return {**await self.view(tenant, current), "deduplicated": True, "changed": False}
        record = await self.store(tenant, current.name, body, parent_def_id=current.def_id or None,
                                  description=current.description, promote=True, run_id=run_id)
        return {**await self.view(tenant, record), "changed": True}

    async def server(self, tenant: str, name: str) -> tuple[McpServerSpec, list[dict[str, Any]]] | None:
        """The active def of `name` as the tool source needs it (treadle/mcp/tools.py)."""
        record = await self.defs.get(tenant, self.kind, name=name)
        if record is None:
            return None
        fields = {k: v for k, v in record.body.items() if k != "tools"}
        return McpServerSpec.model_validate(fields), list(record.body.get("tools") or [])
