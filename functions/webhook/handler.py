"""Webhook function: POST /v1/_webhooks/{name} (unknown names answer 404)."""

from treadle.api import webhooks
from treadle_cloud.http import HttpFunction

handler = HttpFunction([webhooks.router])
