"""The two Lambda assets, made without Docker:

- the dependency layer: `layers/build.py` installs platform wheels into `layers/build/layer/python`;
- the application code: staged here at synth time (treadle, treadle_cloud, functions/ and the
  operator's `treadle.yaml`), plain files copied, so its asset hash changes only with its content.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_LAYER_DIR = ROOT / "layers" / "build" / "layer"
DEFAULT_STAGING_DIR = ROOT / "build" / "lambda-app"
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", ".mypy_cache", "AGENTS.md")


def validate_config(config_file: Path) -> str:
    """The operator YAML as text, after the same validation `treadle serve` does (a broken config
    fails `cdk synth`, not the first invocation). Layers (`base.yaml:bundle.yaml`, as
    TREADLE_CONFIG takes them) ship merged, as one file."""
    import yaml

    from treadle.config import config_layers, load_config, load_config_data
    from treadle.engine.model_routes import check_routes

    check_routes(load_config(config_file), str(config_file))
    if len(config_layers(config_file)) == 1:
        return config_file.read_text()
    merged, source = load_config_data(config_file)
    return f"# merged from {source}\n" + yaml.safe_dump(merged, sort_keys=False)


def starter_config() -> str:
    from treadle.cli.starter import STARTER_YAML

    return STARTER_YAML


def interpreter_candidates(version: str) -> list[str]:
    """Where a Python X.Y may be: `pythonX.Y` on PATH (a pyenv shim may refuse it when another
    version is selected), then pyenv's and uv's installed versions."""
    found = [exe] if (exe := shutil.which(f"python{version}")) else []
    roots = [Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions",
             Path(os.environ.get("UV_PYTHON_INSTALL_DIR", Path.home() / ".local" / "share" / "uv" / "python"))]
    for root in roots:
        if root.is_dir():
            for d in sorted(root.iterdir(), reverse=True):
                if d.name.startswith((version + ".", f"cpython-{version}.")):
                    found.append(str(d / "bin" / f"python{version}"))
    return found


def find_interpreter(version: str) -> str | None:
    """A Python interpreter that really is `version` (X.Y), or None."""
    for exe in interpreter_candidates(version):
        try:
            out = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=30)
        except OSError:
            continue
        if out.returncode == 0 and out.stdout.strip() == version:
            return exe
    return None


def require_interpreter(version: str) -> str:
    """`find_interpreter`, or a synth error that says what to do: code shipped without bytecode is
    compiled again on every cold start (/var/task is read-only), ~100-200 ms of it."""
    exe = find_interpreter(version)
    if exe is None:
        raise RuntimeError(
            f"no Python {version} interpreter found (the Lambda runtime's version) to byte-compile the functions'"
            f" code: install one (pyenv install {version}, uv python install {version}), or pass"
            " -c byte_compile=false to ship it uncompiled (each cold start then compiles it)"
        )
    return exe


def stage_app_code(config_yaml: str, out: Path = DEFAULT_STAGING_DIR, *, compile_with: str | None = None) -> Path:
    """Copy what the functions run into `out` (replacing it) and return it. With an interpreter
    of the runtime's version the code is byte-compiled (/var/task is read-only on Lambda, so
    bytecode not shipped is recompiled on every cold start); hash-checked pycs keep the asset's
    hash a function of the sources."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.copytree(ROOT / "core" / "treadle", out / "treadle", ignore=_IGNORE)
    shutil.copytree(ROOT / "cloud" / "treadle_cloud", out / "treadle_cloud", ignore=_IGNORE)
    shutil.copytree(ROOT / "functions", out / "functions", ignore=_IGNORE)
    (out / "treadle.yaml").write_text(config_yaml)
    as_json = config_as_json(config_yaml)
    if as_json is not None:
        (out / "treadle.json").write_text(as_json)
    if compile_with:
        subprocess.run([compile_with, "-m", "compileall", "-q", "--invalidation-mode", "unchecked-hash", str(out)],
                       check=True)
    return out


def config_as_json(config_yaml: str) -> str | None:
    """The operator YAML as JSON, which the functions read without importing PyYAML (~10-40 ms
    of a cold start); None when the YAML holds something JSON cannot (a date, say)."""
    import json

    import yaml

    try:
        return json.dumps(yaml.safe_load(config_yaml) or {}, indent=1, sort_keys=True)
    except (TypeError, ValueError):
        return None


def staged_config_name(staged: Path) -> str:
    """The file the functions read (TREADLE_CONFIG): treadle.json when the YAML converted."""
    return "treadle.json" if (staged / "treadle.json").is_file() else "treadle.yaml"


def check_layer_dir(layer_dir: Path) -> Path:
    if not (layer_dir / "python").is_dir():
        raise FileNotFoundError(
            f"{layer_dir}/python does not exist: build the dependency layer first"
            " (.venv/bin/python layers/build.py), or pass -c layer_dir=PATH"
        )
    return layer_dir
