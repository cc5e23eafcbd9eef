"""A request's number is a number: JSON true/false is refused where a field holds no boolean
(pydantic's lax mode would read `false` as 0), and kept where it does (wire/_base.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

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
