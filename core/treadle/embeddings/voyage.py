"""Voyage AI embeddings (`POST {base}/embeddings`, input_type document|query)."""

from __future__ import annotations

from typing import Any

from treadle.embeddings.base import EmbedKind
from treadle.embeddings.http import HttpEmbedder, field


class VoyageEmbedder(HttpEmbedder):
    name = "voyage"

    async def _batch(self, texts: list[str], kind: EmbedKind) -> list[list[float]]:
        body: dict[str, Any] = {"model": self.model, "input": texts, "input_type": kind}
        if self.cfg.dimensions:
            body["output_dimension"] = self.cfg.dimensions
        key = self.api_key()
        doc = await self.post(f"{self.base_url}/embeddings", body, {"authorization": f"Bearer {key}"})
        items = sorted(field(doc, "data"), key=lambda d: d.get("index", 0) if isinstance(d, dict) else 0)
        return [field(d, "embedding") for d in items]
