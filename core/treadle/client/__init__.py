"""A small Python client for treadle's HTTP API."""

from treadle.client.http import ApiError, SseEvent, TreadleClient

__all__ = ["ApiError", "SseEvent", "TreadleClient"]
