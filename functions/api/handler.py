"""API function: runs, events, channels and the time-budgeted SSE stream, behind API Gateway's HTTP API
(/v1/_webhooks/* goes to the webhook function); routers imported on first need (treadle_cloud/routes.py),
but for the runs API, which most requests use: imported here, at INIT (its routes are built on first use)."""

import treadle.api.runs  # noqa: F401
from treadle_cloud.http import HttpFunction
from treadle_cloud.routes import api_lazy_routers

handler = HttpFunction(api_lazy_routers())
