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

import types
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
    if typing.get_origin(annotation) is typing.Annotated:  # constraints (Field(gt=0), …) are not types
        return _takes_bool(typing.get_args(annotation)[0])
    args = typing.get_args(annotation)
    return not args or any(_takes_bool(a) for a in args if a is not type(None))


def _bool_for_a_number(annotation: Any, value: Any) -> bool:
    """Whether `value` holds a boolean where `annotation` wants none: the value itself, or an item
    of a list or a value of a mapping whose item type admits no boolean (`[false]` for list[int])."""
    if isinstance(value, bool):
        return not _takes_bool(annotation)
    if not isinstance(value, list | dict):
        return False
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _bool_for_a_number(args[0], value)
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in args if typing.get_origin(a) in ((list, tuple, set, frozenset) if isinstance(value, list)
                                                              else (dict,))]
        return bool(kinds) and all(_bool_for_a_number(a, value) for a in kinds)
    if isinstance(value, list) and origin in (list, set, frozenset) and args:
        return any(_bool_for_a_number(args[0], v) for v in value)
    if isinstance(value, dict) and origin is dict and len(args) == 2:
        return any(_bool_for_a_number(args[1], v) for v in value.values())
    return False


class Request(BaseModel):
    """A request body: a field is honoured or refused, never ignored."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool | list | dict) and info.field_name is not None:
            field = cls.model_fields.get(info.field_name)
            if field is not None and _bool_for_a_number(typing.cast(Any, field.annotation), value):
                raise ValueError("must not be a boolean (a number is a number)" if isinstance(value, bool)
                                 else "must not hold a boolean where a number belongs")
        return value


class Response(BaseModel):
    """A response: the documented fields, plus any the server adds later (kept, not dropped)."""

    model_config = ConfigDict(extra="allow", defer_build=True)
