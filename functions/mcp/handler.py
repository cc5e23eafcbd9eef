"""MCP function: /v1/_mcp (the MCP server itself comes with its own issue)."""

from treadle.api import mcp
from treadle_cloud.http import HttpFunction

handler = HttpFunction([mcp.router])
