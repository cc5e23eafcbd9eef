"""GET /v1/models and POST /v1/embeddings in OpenAI's shapes.

/v1/models lists what `model` may name on /v1/chat/completions — the agents (treadle.yaml's and
the tenant's promoted AgentDefs, `owned_by: treadle:agent`), the `models:` aliases
(`treadle:alias`) and the tiers (`treadle:tier`) — and the embedder's model (`treadle:embedder`).

/v1/embeddings embeds with the configured embedder (`memory.embedder`, the one vector Memory
uses; texts are embedded as documents). `model` may be any name (the one embedder serves them all,
as loomcycle's does) and is echoed back;
`dimensions` must equal what it returns; `encoding_format` float | base64 (float32 little-endian,
as OpenAI); token-array input is refused. `usage` counts are 0: embedders do not report tokens.
"""

from __future__ import annotations

import base64
import logging
import struct
import time
from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, field_validator

from treadle.api.deps import Rt, Who
from treadle.api.errors import errors
from treadle.api.openai_compat.errors import OPENAI_ERRORS, OpenAIRoute
from treadle.api.openai_compat.wire import UnsupportedParameter
from treadle.errors import NotFound
from treadle.runtime import Runtime
from treadle.substrate.memory import MAX_EMBED_TEXT_CHARS
from treadle.substrate.resolve import AGENT
from treadle.wire import EmbeddingList, Model, ModelList

router = APIRouter(prefix="/v1", tags=["openai"], route_class=OpenAIRoute)
audit = logging.getLogger("treadle.audit")
MAX_INPUTS = 2048


def _model(model_id: str, owned_by: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": owned_by}


async def model_list(rt: Runtime, tenant: str) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    promoted = {d.name for d in await rt.engine.tools.defs.list(tenant, AGENT, limit=1000)}
    for name in [*rt.agents, *sorted(promoted)]:
        seen.setdefault(name, _model(name, "treadle:agent"))
    for name in rt.config.models:
        seen.setdefault(name, _model(name, "treadle:alias"))
    for name in rt.config.tiers:
        seen.setdefault(name, _model(name, "treadle:tier"))
    embedder = rt.substrate.memory.embedder
    if embedder is not None:
        seen.setdefault(embedder.model, _model(embedder.model, "treadle:embedder"))
    return list(seen.values())


@router.get("/models", response_model=ModelList, response_model_exclude_unset=True, responses=OPENAI_ERRORS)
async def list_models(rt: Rt, who: Who) -> dict[str, Any]:
    """The names `model` may take (module docstring)."""
    return {"object": "list", "data": await model_list(rt, who.tenant_id)}


@router.get("/models/{model_id}", response_model=Model, response_model_exclude_unset=True, responses=OPENAI_ERRORS)
async def get_model(model_id: str, rt: Rt, who: Who) -> dict[str, Any]:
    for m in await model_list(rt, who.tenant_id):
        if m["id"] == model_id:
            return m
    raise NotFound(f"The model `{model_id}` does not exist", code="model_not_found")


class EmbeddingsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(min_length=1, max_length=256)
    input: str | list[str]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = Field(default=None, max_length=256)

    @field_validator("input", mode="before")
    @classmethod
    def _texts(cls, v: Any) -> Any:
        if isinstance(v, list) and v and not all(isinstance(x, str) for x in v):
            raise ValueError("token arrays are not accepted; send text (a string or an array of strings)")
        return v

    def texts(self) -> list[str]:
        texts = [self.input] if isinstance(self.input, str) else self.input
        if not texts or len(texts) > MAX_INPUTS:
            raise UnsupportedParameter(f"input holds 1 to {MAX_INPUTS} texts", "input", code="invalid_value")
        for i, t in enumerate(texts):
            if not t or len(t) > MAX_EMBED_TEXT_CHARS:
                raise UnsupportedParameter(f"input.{i}: a text of 1 to {MAX_EMBED_TEXT_CHARS} characters",
                                           f"input.{i}", code="invalid_value")
        return texts


def encode(vector: list[float], fmt: str) -> list[float] | str:
    if fmt == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    return vector


@router.post("/embeddings", response_model=EmbeddingList, response_model_exclude_unset=True,
             responses={**OPENAI_ERRORS, **errors(501, openai=True)})  # 501: no embedder configured
async def embeddings(body: EmbeddingsRequest, rt: Rt, who: Who) -> dict[str, Any]:
    """Embed texts with the configured embedder (module docstring)."""
    embedder = rt.substrate.memory.require_embedder()
    # one embedder serves every name (as loomcycle does): clients hard-code `text-embedding-3-small`
    # and the like; the answer echoes the name asked for, the audit line names the embedder
    texts = body.texts()
    started = time.monotonic()
    vectors = await embedder.embed(texts, "document")
    if body.dimensions is not None and vectors and len(vectors[0]) != body.dimensions:
        raise UnsupportedParameter(f"dimensions={body.dimensions}: `{embedder.model}` here returns "
                                   f"{len(vectors[0])} dimensions", "dimensions", code="invalid_value")
    audit.info("embeddings: tenant=%s user=%s requested=%s driver=%s model=%s inputs=%d dimensions=%d latency_ms=%d",
               who.tenant_id, body.user or "", body.model, embedder.name, embedder.model, len(texts),
               len(vectors[0]) if vectors else 0, int((time.monotonic() - started) * 1000))
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": encode(v, body.encoding_format)}
                 for i, v in enumerate(vectors)],
        "model": body.model,
        "usage": {"prompt_tokens": 0, "total_tokens": 0},
    }
