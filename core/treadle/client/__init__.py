"""treadle's Python client (docs/client.md): `Treadle` (sync) and `AsyncTreadle`, one
implementation — the async client is written once and the sync one generated from it."""

from treadle.client import models
from treadle.client._async.client import AsyncTreadle
from treadle.client._base import Retry, SseEvent
from treadle.client._sync.client import Treadle
from treadle.client.errors import ApiError
from treadle.client.http import TreadleClient, parse_sse

__all__ = ["ApiError", "AsyncTreadle", "Retry", "SseEvent", "Treadle", "TreadleClient", "models", "parse_sse"]
