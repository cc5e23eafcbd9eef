"""/v1/_mcp: the MCP server over Streamable HTTP (loomcycle's route).

The MCP server is not in this build: the route answers `501 not_implemented`; any other path of
the MCP function is a plain `404 not_found`.
"""

from __future__ import annotations

from fastapi import APIRouter

from treadle.errors import NotImplementedFeature

router = APIRouter(tags=["mcp"])


@router.api_route("/v1/_mcp", methods=["GET", "POST", "DELETE"], response_model=None)
async def mcp_endpoint() -> None:
    raise NotImplementedFeature("the MCP server is not available in this build")
