"""Walk a loomcycle checkout's configs and load each as treadle would (issue 39's done-when).

    .venv/bin/python scripts/loomcycle_configs.py /path/to/loomcycle [--markdown]

A config is any `*.yaml` / `*.yml` whose top level is a mapping with `agents:` (or `models:` /
`tiers:` / `providers:` and neither `services:` nor `apiVersion:` — Compose and Kubernetes files are
not loomcycle configs). A bundle (a file under a `bundles/` folder) is loaded the way loomcycle
loads it: over its `presets/base.yaml` (the providers, aliases and tiers every deployment starts
from). Each is loaded with treadle's own loader (treadle.config.load_config: the same validation
`treadle doctor` does) and printed PASS, or FAIL with one line per problem treadle names — each a
loomcycle key or feature treadle refuses by name, or a reference the file leaves to a layer it
does not carry. Nothing is started and no model is called. `${VAR}` references are read from the
environment as treadle reads them (unset: empty). `--code-agents` switches code agents on, as a
loomcycle operator does with LOOMCYCLE_CODE_AGENTS_ENABLED=1 (treadle: `code_agents.enabled`)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from treadle.config import load_config
from treadle.errors import ConfigError

SKIP_DIRS = {".git", "node_modules", ".github", "vendor", "testdata"}


def is_config(path: Path) -> bool:
    try:
        doc: Any = yaml.safe_load(path.read_text(errors="replace"))
    except yaml.YAMLError:
        return False
    if not isinstance(doc, dict) or "services" in doc or "apiVersion" in doc:
        return False
    return "agents" in doc or bool({"models", "tiers", "providers"} & set(doc))


def configs(root: Path) -> list[Path]:
    found = []
    for path in sorted(root.rglob("*")):
        if (path.suffix in (".yaml", ".yml") and path.is_file() and not SKIP_DIRS & set(path.parts)
                and is_config(path)):
            found.append(path)
    return found


def base_layer(root: Path) -> Path | None:
    preset = root / "cmd" / "loomcycle" / "embedded" / "presets" / "base.yaml"
    return preset if preset.is_file() else None


def load(path: Path, base: Path | None, switch: Path | None = None) -> list[str]:
    """[] when treadle loads it, else its problems (one line each)."""
    layered = f"{base}:{path}" if base is not None and "bundles" in path.parts else str(path)
    if switch is not None:
        layered = f"{switch}:{layered}"
    try:
        load_config(layered)
    except ConfigError as exc:
        lines = [line.strip() for line in str(exc).splitlines()[1:] if line.strip()] or [str(exc)]
        return [line.split(": ", 1)[1] if ": " in line else line for line in lines]
    return []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkout", type=Path)
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    ap.add_argument("--code-agents", action="store_true", help="with code agents switched on (the operator's switch)")
    args = ap.parse_args()
    switch = None
    if args.code_agents:
        switch = Path(tempfile.mkdtemp(prefix="lc-configs-")) / "code-agents.yaml"
        switch.write_text("code_agents: {enabled: true}\n")
    root: Path = args.checkout.resolve()
    base = base_layer(root)
    found = configs(root)
    passed = 0
    if args.markdown:
        print("| config | treadle | what stops it (one line per problem) |")
        print("|---|---|---|")
    for path in found:
        problems = load(path, base, switch)
        passed += not problems
        rel = path.relative_to(root)
        if args.markdown:
            why = "<br>".join(p.replace("|", "\\|")[:160] for p in problems)
            print(f"| `{rel}` | {'PASS' if not problems else 'FAIL'} | {why} |")
        else:
            print(f"{'PASS' if not problems else 'FAIL'}  {rel}")
            for p in problems:
                print(f"      {p}")
    print(f"\n{passed} of {len(found)} loomcycle configs load in treadle"
          + (f" (bundles over {base.relative_to(root)})" if base is not None else "")
          + (", code agents on" if switch is not None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
