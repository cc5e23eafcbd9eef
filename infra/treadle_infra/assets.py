"""The two Lambda assets, made without Docker:

- the dependency layer: `layers/build.py` installs platform wheels into `layers/build/layer/python`;
- the application code: staged here at synth time (treadle, treadle_cloud, functions/ and the
  operator's `treadle.yaml`), plain files copied, so its asset hash changes only with its content.
"""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_LAYER_DIR = ROOT / "layers" / "build" / "layer"
DEFAULT_STAGING_DIR = ROOT / "build" / "lambda-app"
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", ".mypy_cache", "AGENTS.md")


def validate_config(config_file: Path) -> str:
    """The operator YAML as text, after the same validation `treadle serve` does (a broken config
    fails `cdk synth`, not the first invocation)."""
    from treadle.config import load_config

    load_config(config_file)
    return config_file.read_text()


def starter_config() -> str:
    from treadle.cli.starter import STARTER_YAML

    return STARTER_YAML


def stage_app_code(config_yaml: str, out: Path = DEFAULT_STAGING_DIR) -> Path:
    """Copy what the functions run into `out` (replacing it) and return it."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.copytree(ROOT / "core" / "treadle", out / "treadle", ignore=_IGNORE)
    shutil.copytree(ROOT / "cloud" / "treadle_cloud", out / "treadle_cloud", ignore=_IGNORE)
    shutil.copytree(ROOT / "functions", out / "functions", ignore=_IGNORE)
    (out / "treadle.yaml").write_text(config_yaml)
    return out


def check_layer_dir(layer_dir: Path) -> Path:
    if not (layer_dir / "python").is_dir():
        raise FileNotFoundError(
            f"{layer_dir}/python does not exist: build the dependency layer first"
            " (.venv/bin/python layers/build.py), or pass -c layer_dir=PATH"
        )
    return layer_dir
