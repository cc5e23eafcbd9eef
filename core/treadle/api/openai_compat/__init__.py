"""The OpenAI-compatible front door: /v1/chat/completions (chat.py; agents run through
agentrun.py), /v1/responses (responses.py, translated to a chat request by responses_wire.py;
structured output and tool choice in structured.py), /v1/models and /v1/embeddings (catalog.py),
the wire shapes (wire.py) and OpenAI's
error shape on these routes only (errors.py). User docs: docs/openai.md."""

from __future__ import annotations

from fastapi import APIRouter

from treadle.api.openai_compat import catalog, chat, responses


def routers() -> list[APIRouter]:
    return [chat.router, catalog.router, responses.router]
