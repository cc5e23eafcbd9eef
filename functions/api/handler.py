"""API function: runs, events, channels and the time-budgeted SSE stream, behind API Gateway's HTTP API."""

from treadle.api.app import api_routers
from treadle_cloud.http import HttpFunction

handler = HttpFunction(api_routers())
