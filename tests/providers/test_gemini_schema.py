"""JSON Schema → Gemini's OpenAPI subset (no I/O). Each output is also checked with the fake
Gemini's own schema validator, so what passes here is what the fake vendor accepts."""

from __future__ import annotations

from typing import Any

from tests.support.vendors.gemini import check_schema
from treadle.builtins.registry import default_registry
from treadle.providers.gemini_schema import to_gemini_schema


def convert(schema: dict[str, Any]) -> dict[str, Any]:
    out = to_gemini_schema(schema)
    assert check_schema(out, "parameters") == [], out
    return out


def test_refs_are_inlined() -> None:
    schema = {
        "type": "object",
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                            "required": ["x", "y"], "additionalProperties": False}},
        "properties": {"a": {"$ref": "#/$defs/Point"}, "b": {"$ref": "#/definitions/Missing"}},
        "required": ["a"],
    }  # fmt: skip
    out = convert(schema)
    assert out["properties"]["a"] == {
        "type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"]}
    assert out["properties"]["b"]["type"] == "object"
    assert out["required"] == ["a"]


def test_recursive_ref_stops() -> None:
    schema = {"$defs": {"Node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/Node"}}}},
              "$ref": "#/$defs/Node"}  # fmt: skip
    out = convert(schema)
    assert out["properties"]["child"]["type"] == "object"
    assert "recursive" in out["properties"]["child"]["description"]


def test_all_of_is_merged() -> None:
    schema = {"allOf": [
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
        {"properties": {"b": {"type": "integer", "format": "int64"}}, "required": ["b"]},
    ], "description": "both"}  # fmt: skip
    out = convert(schema)
    assert out == {"type": "object", "description": "both",
                   "properties": {"a": {"type": "string"}, "b": {"type": "integer", "format": "int64"}},
                   "required": ["a", "b"]}  # fmt: skip


def test_one_of_and_any_of_are_merged() -> None:
    schema = {"type": "object", "properties": {"target": {"oneOf": [
        {"type": "object", "properties": {"url": {"type": "string"}, "method": {"type": "string"}},
         "required": ["url", "method"]},
        {"type": "object", "properties": {"url": {"type": "string"}, "body": {"type": "string"}}, "required": ["url"]},
    ]}, "mode": {"anyOf": [{"enum": ["a", "b"]}, {"enum": ["c"]}, {"type": "null"}]}}}  # fmt: skip
    out = convert(schema)
    target = out["properties"]["target"]
    assert set(target["properties"]) == {"url", "method", "body"} and target["required"] == ["url"]
    assert out["properties"]["mode"] == {"type": "string", "enum": ["a", "b", "c"], "nullable": True}


def test_type_arrays_consts_and_unknown_keys() -> None:
    schema = {"type": "object", "additionalProperties": {"type": "string"}, "$schema": "x", "properties": {
        "n": {"type": ["integer", "null"], "exclusiveMinimum": 0, "default": 3},
        "k": {"const": "fixed"},
        "when": {"type": "string", "format": "date-time"},
        "mail": {"type": "string", "format": "email"},
        "any": {},
        "list": {"type": "array"},
        "nums": {"enum": [1, 2]},
    }}  # fmt: skip
    out = convert(schema)
    p = out["properties"]
    assert p["n"] == {"type": "integer", "nullable": True}
    assert p["k"] == {"type": "string", "enum": ["fixed"]}
    assert p["when"]["format"] == "date-time" and "format" not in p["mail"]
    assert p["any"]["type"] == "string" and "any JSON value" in p["any"]["description"]
    assert p["list"] == {"type": "array", "items": {"type": "string"}}
    assert "enum" not in p["nums"]


def test_every_builtin_tool_schema_converts() -> None:
    reg = default_registry()
    assert reg.names()
    for name in reg.names():
        tool = reg.get(name)
        assert tool is not None
        convert(tool.input_schema)
