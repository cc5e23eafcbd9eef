"""API function: runs, events and the time-budgeted SSE stream, behind API Gateway's HTTP API."""

from treadle.api import runs
from treadle_cloud.http import HttpFunction

handler = HttpFunction([runs.router])
