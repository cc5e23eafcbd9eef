"""The two kinds of wire model: a request body (unknown fields refused: 422) and a response
(fields a newer server adds are kept, so an older client still reads the answer).

Both build their validator and serializer on first use (`defer_build`), not when the class is
declared: a process uses a few of the ~100 wire models (the API function: those of the routes its
requests hit — each route is built on its first request, treadle.api.lazyroute), and building a
model's schema is most of what declaring it costs. A SnapStart INIT builds them all
(`treadle.runtime.build_deferred`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Request(BaseModel):
    """A request body: a field is honoured or refused, never ignored."""

    model_config = ConfigDict(extra="forbid", defer_build=True)


class Response(BaseModel):
    """A response: the documented fields, plus any the server adds later (kept, not dropped)."""

    model_config = ConfigDict(extra="allow", defer_build=True)
