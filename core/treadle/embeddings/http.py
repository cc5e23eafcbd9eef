"""What the HTTP drivers share: the API key from the environment, one JSON POST with the
failure modes mapped to stable codes (the key never appears in a message), and batching."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Any

import httpx

from treadle.embeddings.base import EmbedKind, check_vectors
from treadle.errors import EmbedderError
from treadle.specs.memory import EmbedderConfig


class HttpEmbedder(ABC):
    """Base of the HTTP drivers: subclasses set `name` and implement `_batch`."""

    name = "http"

    def __init__(self, cfg: EmbedderConfig, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.cfg = cfg
        self.model = cfg.resolved_model
        self.base_url = cfg.resolved_base_url
        self._transport = transport

    def api_key(self, *, required: bool = True) -> str | None:
        env = self.cfg.resolved_key_env
        key = os.environ.get(env) if env else None
        if required and not key:
            raise EmbedderError(f"{self.name} embedder: {env} is not set", code="embedder_missing_api_key")
        return key or None

    async def embed(self, texts: list[str], kind: EmbedKind) -> list[list[float]]:
        out: list[list[float]] = []
        size = self.cfg.batch_size
        for start in range(0, len(texts), size):
            chunk = texts[start:start + size]
            out.extend(check_vectors(await self._batch(chunk, kind), len(chunk), self.name))
        return out

    @abstractmethod
    async def _batch(self, texts: list[str], kind: EmbedKind) -> list[list[float]]:
        ...

    async def post(self, url: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
        timeout = httpx.Timeout(self.cfg.timeout_seconds, connect=min(10.0, self.cfg.timeout_seconds))
        try:
            async with httpx.AsyncClient(timeout=timeout, transport=self._transport) as client:
                resp = await client.post(url, json=body, headers={"content-type": "application/json", **headers})
        except httpx.TimeoutException:
            raise EmbedderError(f"{self.name} embedder: timed out after {self.cfg.timeout_seconds}s",
                                code="embedder_timeout") from None
        except httpx.HTTPError as exc:
            raise EmbedderError(f"{self.name} embedder: {self.base_url} unreachable ({type(exc).__name__})",
                                code="embedder_unreachable") from None
        if resp.status_code in (401, 403):
            raise EmbedderError(f"{self.name} embedder: HTTP {resp.status_code} (check the API key)",
                                code="embedder_auth")
        if resp.status_code >= 400:
            raise EmbedderError(f"{self.name} embedder: HTTP {resp.status_code}: {_vendor_message(resp)}",
                                code="embedder_rate_limited" if resp.status_code == 429 else "embedder_error")
        try:
            return resp.json()
        except ValueError:
            raise EmbedderError(f"{self.name} embedder: the answer is not JSON", code="embedder_protocol") from None


def _vendor_message(resp: httpx.Response) -> str:
    try:
        doc = resp.json()
    except ValueError:
        return resp.text[:200]
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, dict):
        err = err.get("message") or err.get("code")
    if not err and isinstance(doc, dict):
        err = doc.get("detail") or doc.get("message")
    return str(err or "error")[:300]


def field(doc: Any, *path: str | int) -> Any:
    """doc[path...] or an embedder_protocol error naming the path."""
    cur = doc
    for p in path:
        try:
            cur = cur[p]
        except (KeyError, IndexError, TypeError):
            where = ".".join(str(x) for x in path)
            raise EmbedderError(f"embedder answer lacks {where}", code="embedder_protocol") from None
    return cur


