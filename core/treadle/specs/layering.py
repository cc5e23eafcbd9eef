"""The configuration's files and their layering, as loomcycle's: one path or several joined by
`:`, YAML (with the `!prepend` / `!append` sequence tags) or JSON, merged left to right
(`merge_layers`). The models that validate the merged data are in treadle.config."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from treadle.errors import ConfigError


def config_layers(path: Path | str) -> list[Path]:
    """The files of a configuration: one path, or several joined by `:` (os.pathsep) — loomcycle's
    LOOMCYCLE_CONFIG_FILES — which layer left to right (`merge_layers`). A path that exists as it
    is stays one file, colon or not."""
    p = Path(path)
    text = str(path)
    if p.exists() or os.pathsep not in text:
        return [p]
    return [Path(part) for part in text.split(os.pathsep) if part.strip()]


class Prepend(list[Any]):
    """A sequence tagged `!prepend` in a later layer: its items go in front of the earlier list."""


class Append(list[Any]):
    """A sequence tagged `!append`: its items go after the earlier list."""


def merge_layers(layers: list[Any]) -> Any:
    """loomcycle's config layering (internal/config/layering.go): mappings merge key by key,
    recursively; a sequence tagged `!prepend` / `!append` composes with the earlier one; anything
    else — a scalar, an untagged sequence, a type change — is replaced by the later layer. So two
    layers' `agents:` merge by name (a same-named agent field by field) while a tier's candidate
    list is replaced whole. One layer answers itself (its tags dropped)."""

    def plain(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v

    def fold(base: Any, over: Any) -> Any:
        if isinstance(base, dict) and isinstance(over, dict):
            out = dict(base)
            for k, v in over.items():
                out[k] = fold(base[k], v) if k in base else plain(v)
            return out
        if isinstance(over, Prepend) and isinstance(base, list):
            return [*plain(over), *base]
        if isinstance(over, Append) and isinstance(base, list):
            return [*base, *plain(over)]
        return plain(over)

    merged: Any = None
    for layer in layers:
        if layer is None:
            continue  # an empty (all-comments) layer
        merged = plain(layer) if merged is None else fold(merged, layer)
    return merged


def _read_layer(p: Path) -> Any:
    if not p.exists():
        raise ConfigError(f"{p}: configuration file not found (run `treadle init` to write a starter)")
    if p.suffix == ".json":
        try:
            return json.loads(p.read_text())
        except ValueError as exc:
            raise ConfigError(f"{p}: not valid JSON: {exc}") from None
    import yaml  # only where a YAML file is read (~10 ms of a cold start otherwise)

    class Loader(yaml.SafeLoader):
        pass

    def tagged(kind: type[list[Any]]) -> Any:
        def construct(loader: yaml.SafeLoader, node: yaml.Node) -> list[Any]:
            if not isinstance(node, yaml.SequenceNode):
                raise yaml.constructor.ConstructorError(None, None, f"{node.tag} tags a sequence", node.start_mark)
            return kind(loader.construct_sequence(node, deep=True))

        return construct

    Loader.add_constructor("!prepend", tagged(Prepend))
    Loader.add_constructor("!append", tagged(Append))
    try:
        return yaml.load(p.read_text(), Loader=Loader)  # a SafeLoader plus the two list tags
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from None


def load_config_data(path: Path | str) -> tuple[Any, str]:
    """The configuration's data (its layers merged) and the name errors are reported under."""
    layers = config_layers(path)
    data = [_read_layer(p) for p in layers]
    for p, d in zip(layers, data, strict=True):
        if d is not None and not isinstance(d, dict):
            raise ConfigError(f"{p}: top level must be a mapping, got {type(d).__name__}")
    return merge_layers(data), " + ".join(str(p) for p in layers)
