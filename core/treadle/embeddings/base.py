"""The Embedder port: texts in, one vector per text out, in order.

`kind` says what the text is for: "document" (stored with Memory.set embed=true) or "query"
(Memory.search). Models that embed the two differently (E5, Gemini task types, Voyage
input_type) use it; the others ignore it. Failures raise `EmbedderError` with a stable code and
never carry a credential.
"""

from __future__ import annotations

import math
from typing import Literal, Protocol

from treadle.errors import EmbedderError

EmbedKind = Literal["document", "query"]


class Embedder(Protocol):
    #: the driver (openai, ollama, gemini, voyage, local)
    name: str
    #: the model; vectors from different models are never compared
    model: str

    async def embed(self, texts: list[str], kind: EmbedKind) -> list[list[float]]: ...


def check_vectors(vectors: list[list[float]], expected: int, driver: str) -> list[list[float]]:
    """Every answer: one finite, non-empty vector per text, all of one dimension."""
    if len(vectors) != expected:
        raise EmbedderError(f"{driver}: asked for {expected} embedding(s), got {len(vectors)}",
                            code="embedder_protocol")
    dims = {len(v) for v in vectors}
    if len(dims) > 1 or 0 in dims:
        raise EmbedderError(f"{driver}: embeddings of inconsistent or zero dimension {sorted(dims)}",
                            code="embedder_protocol")
    out: list[list[float]] = []
    for v in vectors:
        try:
            floats = [float(x) for x in v]
        except (TypeError, ValueError):
            raise EmbedderError(f"{driver}: an embedding holds a non-number", code="embedder_protocol") from None
        if not all(math.isfinite(x) for x in floats):
            raise EmbedderError(f"{driver}: an embedding holds a non-finite number", code="embedder_protocol")
        if not any(floats):
            raise EmbedderError(f"{driver}: an embedding is all zeros (cosine is undefined)", code="embedder_protocol")
        out.append(floats)
    return out
