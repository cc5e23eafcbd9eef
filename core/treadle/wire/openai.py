"""The OpenAI-compatible routes' answers, typed to what they send (docs/openai.md); their errors
are OpenAI's `{"error": {message, type, param, code}}`, not treadle's body."""

from __future__ import annotations

from typing import Any

from treadle.wire._base import Response


class OpenAIError(Response):
    message: str
    type: str
    param: str | None = None
    #: treadle's stable code
    code: str | None = None


class OpenAIErrorBody(Response):
    error: OpenAIError


class Model(Response):
    id: str
    object: str
    created: int
    owned_by: str


class ModelList(Response):
    object: str
    data: list[Model]


class Embedding(Response):
    object: str
    index: int
    #: floats, or base64 of little-endian float32 (encoding_format=base64)
    embedding: list[float] | str


class EmbeddingList(Response):
    object: str
    data: list[Embedding]
    model: str
    usage: dict[str, int]


class ChatCompletion(Response):
    """A `chat.completion` (or, streamed, `chat.completion.chunk` frames); `treadle` holds the run
    id, provider and model that answered."""

    id: str
    object: str
    created: int
    model: str
    choices: list[dict[str, Any]]
    usage: dict[str, Any] | None = None
    treadle: dict[str, Any] | None = None


class GatewayResponse(Response):
    """POST /v1/_llm/chat without `stream`: loomcycle's gateway answer."""

    id: str
    request_id: str | None = None
    provider: str
    model: str
    content: list[dict[str, Any]]
    stop_reason: str | None = None
    usage: dict[str, Any] | None = None
