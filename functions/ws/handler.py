"""WebSocket function: $connect, $disconnect and subscribe of the WebSocket API (watchers without a Lambda each)."""

from functions import initialised
from treadle_cloud.ws import WebSocketFunction

handler = initialised(WebSocketFunction())
