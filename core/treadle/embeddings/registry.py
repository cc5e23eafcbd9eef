"""Build the configured embedder (or None)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from treadle.embeddings.base import Embedder
from treadle.specs.memory import EmbedderConfig

if TYPE_CHECKING:  # httpx is imported with an HTTP embedder's driver, not by every runtime
    import httpx


def build_embedder(cfg: EmbedderConfig | None, transport: httpx.AsyncBaseTransport | None = None) -> Embedder | None:
    if cfg is None:
        return None
    if cfg.driver == "local":
        from treadle.embeddings.local import LocalEmbedder

        return LocalEmbedder(cfg)
    from treadle.embeddings.gemini import GeminiEmbedder
    from treadle.embeddings.ollama import OllamaEmbedder
    from treadle.embeddings.openai import OpenAIEmbedder
    from treadle.embeddings.voyage import VoyageEmbedder

    drivers = {"openai": OpenAIEmbedder, "ollama": OllamaEmbedder, "gemini": GeminiEmbedder, "voyage": VoyageEmbedder}
    return drivers[cfg.driver](cfg, transport)  # type: ignore[abstract,no-any-return,unused-ignore]
