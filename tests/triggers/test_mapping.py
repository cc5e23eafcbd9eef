"""Payload mapping: strict JSONPath projection into untrusted blocks (no I/O)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from treadle.specs.mapping import MappingFailed, compile_path, project, raw_block
from treadle.specs.webhook import WebhookSpec

PAYLOAD = {"a": {"b": [10, {"c": "deep"}], "k e y": True, "n": None}, "list": [1, 2, 3]}


@pytest.mark.parametrize("path", ["$", "$.a", "$.a.b[0]", "$.a.b[1].c", "$['a']['k e y']", "$.list[-1]"])
def test_singular_paths_compile(path: str) -> None:
    compile_path(path)


@pytest.mark.parametrize(
    "path", ["$..c", "$.a.*", "$.list[*]", "$.list[0:2]", "$.list[0,1]", "$.a[?@.c]", "a.b", "", "$.a.", "@.a"]
)
def test_anything_else_is_refused(path: str) -> None:
    with pytest.raises(ValueError, match=r"strict path|starts with"):
        compile_path(path)


def test_projection_into_untrusted_blocks() -> None:
    entries = [("deep", "$.a.b[1].c", True), ("whole", "$.a.b", True), ("flag", "$['a']['k e y']", True),
               ("nothing", "$.a.n", True), ("opt", "$.missing", False)]
    blocks, user = project(PAYLOAD, entries)
    assert user is None
    assert [b["text"] for b in blocks] == ["deep: deep", 'whole: [10, {"c": "deep"}]', "flag: true", "nothing: null"]
    assert all(b["type"] == "untrusted-block" and b["kind"] == "untrusted" for b in blocks)
    with pytest.raises(MappingFailed, match=r"missing: x \(\$\.x\), y \(\$\.a\.b\[5\]\)"):
        project(PAYLOAD, [("x", "$.x", True), ("y", "$.a.b[5]", True)])
    _, user = project({"u": "alice_1"}, [("user_id", "$.u", True)])
    assert user == "alice_1"
    with pytest.raises(MappingFailed, match="user_id"):
        project({"u": "alice smith"}, [("user_id", "$.u", True)])
    assert raw_block(b"\xffhello")["text"] == "\ufffdhello"


def test_spec_validates_mapping_at_creation() -> None:
    auth = {"signing_secret_env": "S"}
    WebhookSpec.model_validate({"agent": "a", "auth": auth, "payload_mapping": {"t": "$.x", "u": {"path": "$.y"}}})
    for mapping in ({"t": "$..x"}, {"bad target!": "$.x"}, {"t": {"path": "$.x", "extra": 1}}):
        with pytest.raises(ValidationError):
            WebhookSpec.model_validate({"agent": "a", "auth": auth, "payload_mapping": mapping})
