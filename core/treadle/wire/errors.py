"""The error body every treadle route answers with (the OpenAI-compatible routes answer OpenAI's
own shape instead: `treadle.wire.openai.OpenAIErrorBody`)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from treadle.wire._base import Response


class ErrorDetail(Response):
    """One problem of a refused request (422 `validation_error`): where, and what."""

    loc: list[str] = Field(description="the path to the bad value: `body`, `query`, `path` or `header`, then names")
    msg: str


class ErrorBody(Response):
    """`{"code", "error", "details"?}`: `code` is stable (snake_case, listed in docs/api.md), `error`
    is a message for people; `details` lists every problem of a 422 `validation_error`."""

    code: str = Field(description="stable machine-readable code, e.g. run_not_found, validation_error")
    error: str = Field(description="what went wrong, for people")
    #: every problem of a 422 `validation_error`; an object on the few errors that carry facts
    details: list[ErrorDetail] | dict[str, Any] | None = None
