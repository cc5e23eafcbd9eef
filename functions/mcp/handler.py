"""MCP function: /v1/_mcp and /mcp, treadle's MCP server (stateless Streamable HTTP; treadle/api/mcp)."""

from functions import initialised
from treadle.api import mcp
from treadle_cloud.http import HttpFunction

handler = initialised(HttpFunction([mcp.router]))
