"""The Path tree and Documents off-run (loomcycle's transports for RFC AL and AK):

    POST /v1/_path        body = the Path tool's input, answer = its JSON result
    POST /v1/_document    body = the Document tool's input, answer = its JSON result

The tree or document store is the caller's, resolved from the principal, never the body: the
tenant is the principal's; `scope: user` is the caller's subject, `scope: agent` the synthetic
agent `http-admin` (loomcycle's), `tenant` the tenant's. `?scope_id=` browses another subject's
(or agent's) tree of the same tenant; `?tenant=` another tenant's, for the operator only (a
tenant's caller naming another tenant: 403). A refused op answers 422 `{"code": "tool_refused",
"error", "tool", "reason"}` — `reason` is the tool's own code (`no_such_path`, `stale_revision`, …).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request

from treadle.api.defroutes import op_body
from treadle.api.deps import Rt, Who
from treadle.api.errors import BODY, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.api.openapi import body_doc
from treadle.api.tenantscope import focused_tenant
from treadle.builtins.document import document_op
from treadle.builtins.path import path_op
from treadle.errors import DefRefused, ToolError
from treadle.security.principal import Principal
from treadle.store.dirents import DirentStore, Tree
from treadle.wire import OpResult
from treadle.wire.knowledge import DocumentOp, PathOp

router = APIRouter(prefix="/v1", tags=["knowledge"], route_class=LazyAPIRoute)

#: loomcycle's synthetic agent of the off-run substrate calls: scope=agent off-run is its tree
HTTP_AGENT = "http-admin"


def caller_tree(who: Principal, scope: Any, default: str, scope_id: str | None, tenant: str | None, tool: str) -> Tree:
    """The principal's tree (or store) for `scope`."""
    tenant_id = focused_tenant(who, tenant, doing="browses") or who.tenant_id
    scope = scope or default
    if scope == "agent":
        return Tree(tenant_id, "agent", scope_id or HTTP_AGENT)
    if scope == "user":
        return Tree(tenant_id, "user", scope_id or who.subject)
    if scope == "tenant":
        return Tree(tenant_id, "tenant", "")
    raise ToolError(f"{tool}: unknown scope {scope!r} (agent | user | tenant)", code="invalid_input")


class KnowledgeRefused(DefRefused):
    """A refused Path/Document op: 422 `tool_refused` (what loomcycle's clients branch on), the
    tool's own code as `reason`."""

    def __init__(self, tool: str, exc: ToolError) -> None:
        super().__init__(exc.message)
        self.body_extra = {"tool": tool, "reason": exc.code}


async def run_op(tool: str, call: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    try:
        return await call()
    except ToolError as exc:
        raise KnowledgeRefused(tool, exc) from None


@router.post(
    "/_path",
    response_model=OpResult,
    response_model_exclude_unset=True,
    openapi_extra=body_doc(PathOp),
    responses=errors(*BODY),
)
async def path_route(
    request: Request, rt: Rt, who: Who, scope_id: str | None = None, tenant: str | None = None
) -> dict[str, Any]:
    """One Path op on the caller's tree (resolve, ls, stat, mkdir, mv, rm)."""
    args = await op_body(request)

    async def call() -> dict[str, Any]:
        tree = caller_tree(who, args.get("scope"), "agent", scope_id, tenant, "Path")
        return await path_op(DirentStore(rt.pool), tree, args)

    return await run_op("Path", call)


@router.post(
    "/_document",
    response_model=OpResult,
    response_model_exclude_unset=True,
    openapi_extra=body_doc(DocumentOp),
    responses=errors(*BODY),
)
async def document_route(
    request: Request, rt: Rt, who: Who, scope_id: str | None = None, tenant: str | None = None
) -> dict[str, Any]:
    """One Document op in the caller's store (documents, chunks, edges, types, revisions, Markdown)."""
    args = await op_body(request)

    async def call() -> dict[str, Any]:
        tree = caller_tree(who, args.get("scope"), "user", scope_id, tenant, "Document")
        return await document_op(DirentStore(rt.pool), tree, args, who.subject, rt.substrate.memory)

    return await run_op("Document", call)
