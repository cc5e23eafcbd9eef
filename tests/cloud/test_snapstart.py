"""SnapStart INIT: first-invocation imports land in the snapshot, and each restore reseeds `random`.

Lambda's `snapshot_restore_py` exists only inside the Lambda Python runtime; the subprocess test
puts a stand-in with the same two functions on the path and plays the runtime: INIT (import the
handler module with AWS_LAMBDA_INITIALIZATION_TYPE=snap-start), then "restore" (run the hooks).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from treadle_cloud.snapstart import prepare_snapshot

ROOT = Path(__file__).resolve().parents[2]

STAND_IN = """\
after, before = [], []
def register_after_restore(fn, *a, **kw):
    after.append(fn)
    return fn
def register_before_snapshot(fn, *a, **kw):
    before.append(fn)
    return fn
"""

PLAY = """\
import json, random, sys
import functions.worker.handler  # INIT
import snapshot_restore_py
imported = {m: m in sys.modules for m in ("boto3", "botocore.config", "httpx", "treadle.builtins.files.bash")}
random.seed(7)
snapshot_state = random.random()
random.seed(7)  # the snapshot's state, as every restored environment would start with it
for hook in snapshot_restore_py.after:  # restore
    hook()
print(json.dumps({"hooks": len(snapshot_restore_py.after), "imported": imported,
                  "same_draw_after_restore": random.random() == snapshot_state}))
"""


def run_init(tmp_path: Path, init_type: str, script: str) -> dict[str, Any]:
    """Play the Lambda runtime: run `script` (an INIT, then the restore hooks) under the stand-in."""
    (tmp_path / "snapshot_restore_py.py").write_text(STAND_IN)
    env = {**os.environ, "AWS_LAMBDA_INITIALIZATION_TYPE": init_type,
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert isinstance(out, dict)
    return out


def play(tmp_path: Path, init_type: str) -> dict[str, Any]:
    return run_init(tmp_path, init_type, PLAY)


def test_a_snapstart_init_primes_imports_and_reseeds_after_restore(tmp_path: Path) -> None:
    out = play(tmp_path, "snap-start")
    assert out["hooks"] == 1
    # and what treadle defers to first use (a tool module no agent may name: build_deferred)
    assert out["imported"] == {"boto3": True, "botocore.config": True, "httpx": True,
                               "treadle.builtins.files.bash": True}
    assert out["same_draw_after_restore"] is False


def test_an_on_demand_init_registers_nothing_and_imports_lazily(tmp_path: Path) -> None:
    out = play(tmp_path, "on-demand")
    assert out["hooks"] == 0
    assert out["imported"]["boto3"] is False  # boto3 waits for the first AWS call
    assert out["imported"]["treadle.builtins.files.bash"] is False  # a tool module, for its first use
    assert out["same_draw_after_restore"] is True


def test_prepare_snapshot_survives_a_trimmed_layer() -> None:
    hooks: list[object] = []
    assert prepare_snapshot(hooks.append, imports=("treadle_no_such_module",)) is True
    assert len(hooks) == 1


API_INIT = """\
import json, sys
import functions.api.handler  # INIT
from treadle.api.lazyroute import _DECLARED
from treadle_cloud.routes import API_ROUTERS
print(json.dumps({"routers": sorted({m for m, _a, _p in API_ROUTERS if m in sys.modules}),
                  "routes": len(_DECLARED), "built": sum(r.built for r in _DECLARED),
                  "engine": "treadle.engine.step" in sys.modules}))
"""


def api_init_out(tmp_path: Path, init_type: str) -> dict[str, Any]:
    return run_init(tmp_path, init_type, API_INIT)


def api_init(tmp_path: Path, init_type: str) -> list[str]:
    routers = api_init_out(tmp_path, init_type)["routers"]
    assert isinstance(routers, list)
    return [str(r) for r in routers]


def test_the_api_functions_snapshot_holds_every_router_and_an_on_demand_init_only_the_runs_api(
    tmp_path: Path,
) -> None:
    from treadle_cloud.routes import API_ROUTERS

    every = sorted({m for m, _a, _p in API_ROUTERS})
    assert api_init(tmp_path, "snap-start") == every
    assert len(api_init(tmp_path, "on-demand")) < len(every)


def test_the_api_functions_snapshot_holds_every_route_built_and_an_on_demand_init_none() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        snap = api_init_out(Path(tmp), "snap-start")
        cold = api_init_out(Path(tmp), "on-demand")
    assert snap["routes"] == snap["built"] and snap["routes"] > 60
    assert snap["engine"] is True  # build_deferred: the engine's modules too
    assert cold["built"] == 0 and cold["routes"] > 0
    assert cold["engine"] is False  # Runtime.engine: built on first use


MCP_INIT = """\
import json, sys
import functions.mcp.handler  # INIT
print(json.dumps({m: m in sys.modules for m in ("treadle.api.mcp.server", "mcp.server.streamable_http_manager")}))
"""


def test_the_mcp_functions_snapshot_holds_the_mcp_server_and_an_on_demand_init_does_not(tmp_path: Path) -> None:
    """Its first request after a restore imported the MCP SDK (3.6 s of 4.5 s under awslambdaric on
    a loaded machine; issue 43 item 2)."""
    assert run_init(tmp_path, "snap-start", MCP_INIT) == {
        "treadle.api.mcp.server": True, "mcp.server.streamable_http_manager": True}
    assert run_init(tmp_path, "on-demand", MCP_INIT) == {
        "treadle.api.mcp.server": False, "mcp.server.streamable_http_manager": False}
