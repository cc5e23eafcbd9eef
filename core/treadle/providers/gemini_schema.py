"""JSON Schema → the OpenAPI-3.0 subset Gemini's `functionDeclarations[].parameters` accepts.

Gemini rejects `$ref`/`$defs`, `oneOf`/`allOf`, `additionalProperties`, `const`, type arrays and
unknown `format`s, and wants a `type` on every schema. This rewrite:
- inlines `$ref` (`#/$defs/X`, `#/definitions/X`; a cycle becomes a described `object`);
- merges `allOf` (union of properties and required), and `anyOf`/`oneOf` (union of properties,
  required only where every variant requires it; a `null` variant becomes `nullable: true`);
- turns `type: [T, "null"]` into `type: T, nullable: true`, `const` into a one-value `enum`;
- keeps only the keys Gemini knows, and gives type-less schemas a type (an untyped value is
  described and sent as a string).
"""

from __future__ import annotations

from typing import Any

KEEP = {
    "type", "format", "description", "nullable", "enum", "properties", "required", "items",
    "minItems", "maxItems", "minimum", "maximum", "minLength", "maxLength", "pattern", "title",
}  # fmt: skip
FORMATS = {"string": {"date-time", "enum"}, "integer": {"int32", "int64"}, "number": {"float", "double"}}
MAX_DEPTH = 24


def to_gemini_schema(schema: dict[str, Any]) -> dict[str, Any]:
    return _convert(schema, schema, 0, ())


def _resolve(ref: str, root: dict[str, Any]) -> dict[str, Any] | None:
    if not ref.startswith("#/"):
        return None
    node: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, dict) else None


def _convert(s: Any, root: dict[str, Any], depth: int, seen: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(s, dict) or depth > MAX_DEPTH:
        return {"type": "string"}
    if "$ref" in s:
        ref = str(s["$ref"])
        target = _resolve(ref, root)
        if target is None or ref in seen:
            return {"type": "object", "description": s.get("description") or f"(recursive {ref.rsplit('/', 1)[-1]})"}
        merged = {**target, **{k: v for k, v in s.items() if k != "$ref"}}
        return _convert(merged, root, depth + 1, (*seen, ref))

    s = dict(s)
    nullable = bool(s.pop("nullable", False))
    parts: list[dict[str, Any]] = []
    for key in ("allOf",):
        for sub in s.pop(key, None) or []:
            parts.append(_convert(sub, root, depth + 1, seen))
    variants: list[dict[str, Any]] = []
    for key in ("anyOf", "oneOf"):
        for sub in s.pop(key, None) or []:
            if isinstance(sub, dict) and sub.get("type") == "null":
                nullable = True
                continue
            variants.append(_convert(sub, root, depth + 1, seen))

    out: dict[str, Any] = {}
    t = s.get("type")
    if isinstance(t, list):
        kinds = [x for x in t if x != "null"]
        nullable = nullable or len(kinds) < len(t)
        t = kinds[0] if kinds else "string"
    if t == "null":
        t, nullable = "string", True
    if "const" in s:
        s["enum"] = [s["const"]]
    if isinstance(t, str):
        out["type"] = t
    for k in ("description", "title", "minItems", "maxItems", "minimum", "maximum", "minLength", "maxLength",
              "pattern"):  # fmt: skip
        if k in s:
            out[k] = s[k]
    if "enum" in s and isinstance(s["enum"], list):
        values = [v for v in s["enum"] if v is not None]
        if all(isinstance(v, str) for v in values):
            out["enum"] = values
            out.setdefault("type", "string")
        if len(values) < len(s["enum"]):
            nullable = True
    if isinstance(s.get("properties"), dict):
        out["properties"] = {k: _convert(v, root, depth + 1, seen) for k, v in s["properties"].items()}
    if isinstance(s.get("required"), list):
        out["required"] = [str(r) for r in s["required"]]
    if "items" in s:
        out["items"] = _convert(s["items"], root, depth + 1, seen)

    for p in parts:
        out = _merge_all(out, p)
    if variants:
        out = _merge_all(out, _merge_any(variants))

    if "type" not in out:
        if "properties" in out:
            out["type"] = "object"
        elif "items" in out:
            out["type"] = "array"
        else:
            out["type"] = "string"
            out["description"] = ((out.get("description") or "") + " (any JSON value, as text)").strip()
    if out["type"] == "array" and "items" not in out:
        out["items"] = {"type": "string"}
    fmt = s.get("format")
    if isinstance(fmt, str) and fmt in FORMATS.get(out["type"], set()):
        out["format"] = fmt
    if "properties" in out and "required" in out:
        out["required"] = [r for r in out["required"] if r in out["properties"]]
        if not out["required"]:
            del out["required"]
    elif "required" in out:
        del out["required"]
    if out["type"] != "object":
        out.pop("properties", None)
    if nullable:
        out["nullable"] = True
    return {k: v for k, v in out.items() if k in KEEP}


def _merge_all(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """allOf: every part applies — union properties and required; the first value wins otherwise."""
    out = dict(a)
    for k, v in b.items():
        if k == "properties":
            out["properties"] = {**v, **out.get("properties", {})}
        elif k == "required":
            out["required"] = list(dict.fromkeys([*out.get("required", []), *v]))
        elif k not in out:
            out[k] = v
    return out


def _merge_any(variants: list[dict[str, Any]]) -> dict[str, Any]:
    """anyOf/oneOf: one part applies — union of properties, required only if all require it."""
    if len(variants) == 1:
        return variants[0]
    out: dict[str, Any] = {}
    types = [v.get("type") for v in variants]
    out["type"] = types[0] if all(t == types[0] for t in types) else ("object" if "object" in types else types[0])
    props: dict[str, Any] = {}
    for v in variants:
        for k, p in (v.get("properties") or {}).items():
            props.setdefault(k, p)
    if props:
        out["properties"] = props
    required = [set(v.get("required") or []) for v in variants]
    common = set.intersection(*required) if required else set()
    if common:
        out["required"] = sorted(common)
    enums = [v.get("enum") for v in variants]
    if all(isinstance(e, list) for e in enums):
        out["enum"] = list(dict.fromkeys(x for e in enums for x in e or []))
    descs = [str(v["description"]) for v in variants if v.get("description")]
    if descs:
        out["description"] = " | ".join(descs)
    items = [v["items"] for v in variants if "items" in v]
    if items:
        out["items"] = items[0]
    return out
