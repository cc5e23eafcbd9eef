"""API function: runs, events, channels and the time-budgeted SSE stream, behind API Gateway's HTTP API
(/v1/_webhooks/* goes to the webhook function)."""

from treadle.api.app import api_routers
from treadle_cloud.http import HttpFunction

handler = HttpFunction(api_routers(webhooks=False))
