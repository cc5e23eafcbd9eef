"""Gemini embeddings (`POST {base}/models/{model}:batchEmbedContents`, key in x-goog-api-key).
Documents embed as RETRIEVAL_DOCUMENT, queries as RETRIEVAL_QUERY."""

from __future__ import annotations

from typing import Any

from treadle.embeddings.base import EmbedKind
from treadle.embeddings.http import HttpEmbedder, field

TASK = {"document": "RETRIEVAL_DOCUMENT", "query": "RETRIEVAL_QUERY"}


class GeminiEmbedder(HttpEmbedder):
    name = "gemini"

    async def _batch(self, texts: list[str], kind: EmbedKind) -> list[list[float]]:
        model = self.model if self.model.startswith("models/") else f"models/{self.model}"
        requests: list[dict[str, Any]] = []
        for text in texts:
            req: dict[str, Any] = {"model": model, "content": {"parts": [{"text": text}]}, "taskType": TASK[kind]}
            if self.cfg.dimensions:
                req["outputDimensionality"] = self.cfg.dimensions
            requests.append(req)
        key = self.api_key()
        headers = {"x-goog-api-key": key} if key else {}
        doc = await self.post(f"{self.base_url}/{model}:batchEmbedContents", {"requests": requests}, headers)
        return [field(e, "values") for e in field(doc, "embeddings")]
