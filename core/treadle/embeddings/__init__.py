"""Embedders: the port (`Embedder`), HTTP drivers (OpenAI, Ollama, Gemini, Voyage) and an offline
local model (`local`, the `embed-local` extra). `registry.build_embedder(config)` picks one from
`memory.embedder` in treadle.yaml; without one, embed requests fail with `embedder_not_configured`.
"""

from treadle.embeddings.base import Embedder, EmbedKind
from treadle.specs.memory import EmbedderConfig, MemoryConfig

__all__ = ["EmbedKind", "Embedder", "EmbedderConfig", "MemoryConfig"]
