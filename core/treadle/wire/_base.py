"""The two kinds of wire model: a request body (unknown fields refused: 422) and a response
(fields a newer server adds are kept, so an older client still reads the answer)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Request(BaseModel):
    """A request body: a field is honoured or refused, never ignored."""

    model_config = ConfigDict(extra="forbid")


class Response(BaseModel):
    """A response: the documented fields, plus any the server adds later (kept, not dropped)."""

    model_config = ConfigDict(extra="allow")
