"""MCP function: /v1/_mcp and /mcp, treadle's MCP server (stateless Streamable HTTP; treadle/api/mcp).
Under SnapStart the MCP server module (the MCP SDK, the meta-tools) goes into the snapshot: the
first request after a restore imported it otherwise (3.6 s of a 4.5 s first call, measured with
scripts/coldstart.py --ric)."""

from functions import initialised
from treadle.api import mcp
from treadle_cloud.http import HttpFunction

# (snapshot_imports: what a first request imports; treadle.api.mcp's endpoint imports it at the request)
handler = initialised(HttpFunction([mcp.router], snapshot_imports=("treadle.api.mcp.server",)))
