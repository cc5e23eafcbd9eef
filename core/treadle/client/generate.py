"""Writes _sync/client.py from _async/client.py with unasync (a dev dependency): `python -m
treadle.client.generate` after editing the async client. tests/client/test_generated.py fails
when the committed sync client is not what this writes."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
SOURCE = HERE / "_async" / "client.py"
TARGET = HERE / "_sync" / "client.py"
HEADER = "# GENERATED from treadle/client/_async/client.py by `python -m treadle.client.generate`: do not edit.\n"
RENAMES = {
    "AsyncClient": "Client",
    "AsyncBaseTransport": "BaseTransport",
    "aclose": "close",
    "aread": "read",
    "aiter_lines": "iter_lines",
    "async_sleep": "sleep",
    "_async": "_sync",
}


def render() -> str:
    """The sync client's text."""
    import re

    import unasync

    source = SOURCE.read_text()
    classes = set(re.findall(r"^class (Async\w+)", source, re.M))
    renames = {**RENAMES, **{name: name.removeprefix("Async") for name in classes}}
    with tempfile.TemporaryDirectory() as tmp:
        src_dir, out_dir = Path(tmp) / "_async", Path(tmp) / "_sync"
        src_dir.mkdir()
        (src_dir / "client.py").write_text(source)
        rule = unasync.Rule(str(src_dir), str(out_dir), additional_replacements=renames)
        unasync.unasync_files([str(src_dir / "client.py")], [rule])
        return HEADER + (out_dir / "client.py").read_text()


def main() -> int:
    TARGET.write_text(render())
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
