"""The two kinds of wire model: a request body (unknown fields refused: 422) and a response
(fields a newer server adds are kept, so an older client still reads the answer).

Both build their validator and serializer on first use (`defer_build`), not when the class is
declared: a process uses a few of the ~100 wire models (the API function: those of the routes its
requests hit — each route is built on its first request, treadle.api.lazyroute), and building a
model's schema is most of what declaring it costs. A SnapStart INIT builds them all
(`treadle.runtime.build_deferred`).

A request's number is a number: JSON `true`/`false` is refused where the field holds no boolean
(pydantic's lax mode would take `false` as 0 — the spec says integer)."""

from __future__ import annotations

import typing
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


@cache
def _takes_bool(annotation: Any) -> bool:
    """Whether a field's type admits a boolean (bool, Any, or a union/container holding one)."""
    if annotation is bool or annotation is Any or annotation is object:
        return True
    if annotation in (int, float, str) or isinstance(annotation, type):
        return False
    args = typing.get_args(annotation)
    return not args or any(_takes_bool(a) for a in args if a is not type(None))


class Request(BaseModel):
    """A request body: a field is honoured or refused, never ignored."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name is not None:
            field = cls.model_fields.get(info.field_name)
            if field is not None and not _takes_bool(typing.cast(Any, field.annotation)):
                raise ValueError("must not be a boolean")
        return value


class Response(BaseModel):
    """A response: the documented fields, plus any the server adds later (kept, not dropped)."""

    model_config = ConfigDict(extra="allow", defer_build=True)
