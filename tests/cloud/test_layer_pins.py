"""The layer's pins against the Lambda runtime it shadows, and the byte-compile rule."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[2]


def layer_requirements() -> dict[str, Requirement]:
    out = {}
    for line in (ROOT / "layers" / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            out[req.name.lower()] = req
    return out


def test_python_dateutil_stays_in_botocores_range() -> None:
    """The layer comes first on sys.path: the runtime's botocore imports the layer's dateutil."""
    [botocore_needs] = [Requirement(r) for r in metadata.requires("botocore") or []
                        if r.lower().startswith("python-dateutil")]
    pinned = layer_requirements()["python-dateutil"].specifier
    assert pinned == SpecifierSet(str(botocore_needs.specifier)), (pinned, botocore_needs.specifier)


def test_the_stream_functions_server_is_in_the_layer() -> None:
    assert "uvicorn" in layer_requirements()


def test_building_the_layer_without_the_runtimes_python_fails_loudly(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "layers" / "build.py"), "--python", "3.99",
                           "--out", str(tmp_path / "layer")], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and re.search(r"no Python 3\.99 interpreter .* --no-compile", proc.stderr)
    assert not (tmp_path / "layer").exists()  # nothing downloaded


def test_synth_without_the_runtimes_python_fails_loudly() -> None:
    sys.path.insert(0, str(ROOT / "infra"))
    import pytest

    from treadle_infra.assets import require_interpreter

    with pytest.raises(RuntimeError, match=r"no Python 3\.99 interpreter found .* -c byte_compile=false"):
        require_interpreter("3.99")
