"""A code agent (providers/codejs.py) in the cloud shape: the real api and worker handlers, moto's
SQS, a real Postgres. Each tool call is one SQS-delivered step that replays the JavaScript from the
transcript; the worker holds nothing between them."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from tests.cloud.test_cloud_path import all_terminal, call, events_of, queue_is_empty, run_rows, start_run
from tests.e2e.test_code_agent_crash import CALLS, expected_text
from tests.e2e.test_code_agent_crash import CODE as FIFTY
from tests.support.lambda_sim import EventSourceMapping, LambdaEnv
from treadle.providers.codejs import CodeJsProvider

pytest.importorskip("quickjs")

CODE = """
function run(input) {
  var n = parseInt(input.prompt, 10), got = [];
  for (var i = 0; i < n; i++) {
    got.push(Memory.incr({scope: 'agent', key: 'cloud-n'}).value);
  }
  return {final_text: 'counted ' + got.length};
}
"""

SPIN = """
function run(input) {
  Memory.incr({scope: 'agent', key: 'spun'});
  var x = 0;
  while (true) { x++; }
}
"""


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cloudcode") / "treadle.yaml"
    path.write_text(yaml.safe_dump({
        "code_agents": {"enabled": True, "step_timeout_seconds": 8, "deterministic": True},
        "agents": {"counter": {"provider": "code-js", "tools": ["Memory"], "code": CODE},
                   "fifty": {"provider": "code-js", "tools": ["Memory"], "code": FIFTY},
                   "spin": {"provider": "code-js", "tools": ["Memory"], "code": SPIN}},
    }))
    return path


def test_a_code_agent_runs_step_by_step_through_sqs(
    cloud_env: dict[str, str], sqs: Any, queue: dict[str, str], cloud_db: str,
) -> None:
    api, worker = LambdaEnv("api"), LambdaEnv("worker")
    try:
        run_id = start_run(api, "counter", "4")
        esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [worker])
        esm.run_until(lambda: all_terminal(cloud_db, [run_id]), timeout_s=120)
        assert queue_is_empty(sqs, queue["url"])
        assert run_rows(cloud_db, [run_id])[run_id]["status"] == "completed"
        events = events_of(api, run_id)
        assert [e["type"] for e in events].count("tool_result") == 4
        assert [e["text"] for e in events if e["type"] == "text"] == ["counted 4"]
        status, _, _ = call(api, "GET", f"/v1/runs/{run_id}")
        assert status == 200
    finally:
        api.close()
        worker.close()


def test_the_kill_9_agent_of_fifty_calls_runs_in_the_cloud_worker(
    cloud_env: dict[str, str], sqs: Any, queue: dict[str, str], cloud_db: str,
) -> None:
    """tests/e2e/test_code_agent_crash.py's code agent (50 Memory calls), one SQS-delivered step a
    call, with the final text of the sidecar's runs (the deterministic seed and clock)."""
    api, worker = LambdaEnv("api"), LambdaEnv("worker")
    try:
        run_id = start_run(api, "fifty", str(CALLS))
        esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [worker])
        esm.run_until(lambda: all_terminal(cloud_db, [run_id]), timeout_s=240)
        assert run_rows(cloud_db, [run_id])[run_id]["status"] == "completed"
        events = events_of(api, run_id)
        assert [e["type"] for e in events].count("tool_result") == CALLS
        assert [e["text"] for e in events if e["type"] == "text"] == [expected_text()]
        with psycopg.connect(cloud_db) as conn:
            n = conn.execute("SELECT value FROM memory WHERE scope = 'agent' AND scope_id = 'fifty' AND key = 'calls'"
                             ).fetchone()
        assert n is not None and int(n[0]) == CALLS // 2
    finally:
        api.close()
        worker.close()


def test_a_cancel_while_the_code_computes_ends_code_agent_cancelled(
    cloud_env: dict[str, str], sqs: Any, queue: dict[str, str], cloud_db: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker Lambda's step spins in the code's second replay; the api cancels the run; the
    worker hears it by polling and ends the run `cancelled` with `code_agent_cancelled` well
    before the step's 8 s limit (the replay's answer, whenever it comes, is dropped)."""
    replaying = threading.Event()
    real = CodeJsProvider.replay

    def spy(self: CodeJsProvider, src: str, tools: list[str], run_input: dict[str, Any], recorded: list[Any],
            **kw: Any) -> Any:
        if recorded:
            replaying.set()
        return real(self, src, tools, run_input, recorded, **kw)

    monkeypatch.setattr(CodeJsProvider, "replay", spy)
    api, worker = LambdaEnv("api"), LambdaEnv("worker")
    failure: list[BaseException] = []
    try:
        run_id = start_run(api, "spin", "go")
        esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [worker])

        def drive() -> None:
            try:
                esm.run_until(lambda: all_terminal(cloud_db, [run_id]), timeout_s=120)
            except BaseException as exc:  # reported by the test thread
                failure.append(exc)

        driver = threading.Thread(target=drive)
        driver.start()
        assert replaying.wait(60), "the second replay never started"
        t0 = time.monotonic()
        status, body, _ = call(api, "POST", f"/v1/runs/{run_id}/cancel", {"scope": "run", "reason": "operator stop"})
        assert status == 200, body
        driver.join(90)
        took = time.monotonic() - t0
        assert not failure and not driver.is_alive(), failure
        with psycopg.connect(cloud_db, row_factory=psycopg.rows.dict_row) as conn:
            row = conn.execute("SELECT status, error FROM runs WHERE id = %s", (run_id,)).fetchone()
        assert row is not None and row["status"] == "cancelled", row
        assert row["error"] == {"code": "code_agent_cancelled", "error": "code_agent_cancelled: operator stop"}, row
        assert took < 6, took  # the poll (1 s) and the commit, not the step's 8 s limit
        assert [e["type"] for e in events_of(api, run_id)][-1] == "done"
        # the worker goes on: a code agent after it runs to the end (and the cancel's own step
        # message, for a run that had ended, is taken and dropped)
        good = start_run(api, "counter", "2")
        esm.run_until(lambda: all_terminal(cloud_db, [good]) and queue_is_empty(sqs, queue["url"]), timeout_s=120)
        assert run_rows(cloud_db, [good])[good]["status"] == "completed"
    finally:
        api.close()
        worker.close()
