"""Webhook function: /v1/_webhooks/* — signed deliveries and their triage routes (treadle.api.webhooks)."""

from functions import initialised
from treadle.api import webhooks
from treadle_cloud.http import HttpFunction

handler = initialised(HttpFunction([webhooks.router]))
