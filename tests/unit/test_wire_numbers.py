"""A request's number is a number: JSON true/false is refused where a field holds no boolean
(pydantic's lax mode would read `false` as 0), and kept where it does (wire/_base.py)."""

from __future__ import annotations

import importlib
import pkgutil
import typing
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from treadle import wire
from treadle.wire._base import Request
from treadle.wire.channels import AckRequest
from treadle.wire.runs import BatchRequest, ToolResultRequest


@pytest.mark.parametrize("value", [False, True])
def test_a_boolean_is_not_a_number(value: bool) -> None:
    with pytest.raises(ValidationError, match="must not be a boolean"):
        BatchRequest.model_validate({"spawns": [{}], "timeout_ms": value})
    with pytest.raises(ValidationError, match="must not be a boolean"):
        AckRequest.model_validate({"cursor": value})


def test_numbers_and_real_booleans_pass() -> None:
    assert BatchRequest.model_validate({"spawns": [{}], "timeout_ms": 5}).timeout_ms == 5
    assert AckRequest.model_validate({"cursor": 7}).cursor == 7
    assert ToolResultRequest.model_validate({"tool_use_id": "t", "content": "x", "is_error": True}).is_error


def _request_models() -> list[type[Request]]:
    for mod in pkgutil.iter_modules(wire.__path__):
        importlib.import_module(f"treadle.wire.{mod.name}")

    def subclasses(cls: type[Request]) -> Iterator[type[Request]]:
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    return sorted(set(subclasses(Request)), key=lambda c: c.__qualname__)


def _holds_a_number(annotation: Any) -> bool:
    return annotation in (int, float) or any(_holds_a_number(a) for a in typing.get_args(annotation))


def _admits_a_boolean(annotation: Any) -> bool:
    """The field's own type names bool (or Any): then `false` is a value, not a mistake."""
    if annotation is bool or annotation is Any or annotation is object:
        return True
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Annotated:
        args = args[:1]  # the rest is metadata (Field(gt=0), …)
    return any(_admits_a_boolean(a) for a in args)


def test_no_request_model_reads_a_boolean_as_a_number() -> None:
    """Every number field of every request body (wire.Request), alone or in a list or a mapping:
    `false` is refused by name, never read as 0 (a field whose type admits a boolean is exempt)."""
    checked, read_as_numbers = 0, list[tuple[str, str, object, object]]()
    for cls in _request_models():
        for name, field in cls.model_fields.items():
            annotation: Any = field.annotation
            if not _holds_a_number(annotation) or _admits_a_boolean(annotation):
                continue
            for value in (False, [False], {"k": False}):
                checked += 1
                try:
                    cls.model_validate({name: value})
                except ValidationError as exc:
                    mine = [e for e in exc.errors() if e["loc"][:1] == (name,)]  # (other fields: required ones)
                    if any("boolean" in e["msg"] or e["type"].endswith("_type") for e in mine):
                        continue  # refused by name, or a list/mapping where the field takes none
                    read_as_numbers.append((cls.__name__, name, value, [e["msg"] for e in mine] or "accepted"))
                else:
                    read_as_numbers.append((cls.__name__, name, value, "accepted"))
    assert checked > 60
    assert read_as_numbers == []
