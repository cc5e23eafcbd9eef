"""API function: runs, events, channels and the time-budgeted SSE stream, behind API Gateway's HTTP API
(/v1/_webhooks/* goes to the webhook function); routers imported on first need (treadle_cloud/routes.py)."""

from functions import initialised
from treadle_cloud.http import HttpFunction
from treadle_cloud.routes import api_lazy_routers

handler = initialised(HttpFunction(api_lazy_routers()))
