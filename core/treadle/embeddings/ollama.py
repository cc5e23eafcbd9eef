"""Ollama embeddings (`POST {base}/api/embed`, batch input)."""

from __future__ import annotations

from typing import Any

from treadle.embeddings.base import EmbedKind
from treadle.embeddings.http import HttpEmbedder, field


class OllamaEmbedder(HttpEmbedder):
    name = "ollama"

    async def _batch(self, texts: list[str], kind: EmbedKind) -> list[list[float]]:
        body: dict[str, Any] = {"model": self.model, "input": texts}
        if self.cfg.dimensions:
            body["dimensions"] = self.cfg.dimensions
        key = self.api_key(required=False)  # Ollama's cloud takes a bearer; a local server none
        headers = {"authorization": f"Bearer {key}"} if key else {}
        doc = await self.post(f"{self.base_url}/api/embed", body, headers)
        return list(field(doc, "embeddings"))
