"""OpenAI embeddings (`POST {base}/embeddings`): also any OpenAI-compatible server."""

from __future__ import annotations

from typing import Any

from treadle.embeddings.base import EmbedKind
from treadle.embeddings.http import HttpEmbedder, field


class OpenAIEmbedder(HttpEmbedder):
    name = "openai"

    async def _batch(self, texts: list[str], kind: EmbedKind) -> list[list[float]]:
        body: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.cfg.dimensions:
            body["dimensions"] = self.cfg.dimensions
        # an OpenAI-compatible server at a custom base_url gets a key only when api_key_env names one
        custom = self.cfg.base_url is not None
        key = None if custom and self.cfg.api_key_env is None else self.api_key(required=not custom)
        headers = {"authorization": f"Bearer {key}"} if key else {}
        doc = await self.post(f"{self.base_url}/embeddings", body, headers)
        data = field(doc, "data")
        items = sorted(data, key=lambda d: d.get("index", 0) if isinstance(d, dict) else 0)
        return [field(d, "embedding") for d in items]
