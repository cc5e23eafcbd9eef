"""A local server speaking the OpenAI embeddings API on 127.0.0.1 (HTTP/1.1 over a real socket).

`POST /v1/embeddings` with `{"model", "input": str | [str], "encoding_format"?: "float" |
"base64", "dimensions"?}` and `Authorization: Bearer <key>` answers like the vendor:
`{"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model", "usage"}`,
or `{"error": {"message", "type", "param", "code"}}` with 401 / 400 / 404. The vectors are a
deterministic hashed bag of words (so shared words mean similar vectors), L2-normalized.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import math
import re
import struct
from typing import Any

STOP = {"the", "a", "an", "of", "and", "or", "to", "in", "on", "is", "are", "for", "with", "which", "what", "how"}
MODELS = {"text-embedding-3-small": 1536, "fake-embed-384": 384}


def bag_of_words(text: str, dim: int) -> list[float]:
    vec = [0.0] * dim
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        if word in STOP:
            continue
        h = hashlib.blake2b(word.encode(), digest_size=8).digest()
        vec[int.from_bytes(h[:4], "big") % dim] += 1.0 if h[4] & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    if not any(vec):
        vec[0] = 1.0
    return [x / norm for x in vec]


def _error(status: int, message: str, code: str | None, etype: str = "invalid_request_error") -> tuple[int, Any]:
    return status, {"error": {"message": message, "type": etype, "param": None, "code": code}}


class FakeOpenAIEmbeddings:
    def __init__(self, api_key: str = "sk-test") -> None:
        self.api_key = api_key
        self.requests: list[dict[str, Any]] = []
        self.url = ""
        #: requests that reached the server (answered or not); while `hold` is set and not yet
        #: released, each request waits on it before it is answered (a crash test's window)
        self.arrived = 0
        self.hold: asyncio.Event | None = None
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> FakeOpenAIEmbeddings:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    def answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        if method != "POST" or path != "/v1/embeddings":
            return _error(404, f"Invalid URL ({method} {path})", None)
        if headers.get("authorization") != f"Bearer {self.api_key}":
            return _error(401, "Incorrect API key provided.", "invalid_api_key")
        try:
            req = json.loads(body)
        except ValueError:
            return _error(400, "We could not parse the JSON body of your request.", None)
        self.requests.append(req)
        model, inputs = req.get("model"), req.get("input")
        if model not in MODELS:
            return _error(404, f"The model `{model}` does not exist or you do not have access to it.",
                          "model_not_found")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not inputs or not all(isinstance(t, str) and t for t in inputs):
            return _error(400, "'input' : input must be a non-empty string or array of strings", None)
        dim = req.get("dimensions") or MODELS[model]
        fmt = req.get("encoding_format", "float")
        data = []
        for i, text in enumerate(inputs):
            vec = bag_of_words(text, dim)
            emb: Any = vec if fmt == "float" else base64.b64encode(struct.pack(f"<{dim}f", *vec)).decode()
            data.append({"object": "embedding", "index": i, "embedding": emb})
        tokens = sum(len(t.split()) for t in inputs)
        return 200, {"object": "list", "data": data, "model": model,
                     "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                method, target, _ = line.decode("latin-1").split(" ", 2)
                headers: dict[str, str] = {}
                while (h := (await reader.readline()).decode("latin-1").rstrip("\r\n")):
                    name, _, value = h.partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.arrived += 1
                if self.hold is not None:
                    await self.hold.wait()
                status, doc = self.answer(method, target.split("?")[0], headers, body)
                payload = json.dumps(doc).encode()
                writer.write(f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
                             f"content-length: {len(payload)}\r\n\r\n".encode() + payload)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return
        finally:
            with contextlib.suppress(Exception):
                writer.close()
