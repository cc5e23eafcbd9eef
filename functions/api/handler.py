"""API function: runs, events, channels and the time-budgeted SSE stream, behind API Gateway's HTTP API
(/v1/_webhooks/* goes to the webhook function); routers imported on first need (treadle_cloud/routes.py)."""

from treadle_cloud.http import HttpFunction
from treadle_cloud.routes import api_lazy_routers

handler = HttpFunction(api_lazy_routers())
