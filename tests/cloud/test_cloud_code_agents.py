"""A code agent (providers/codejs.py) in the cloud shape: the real api and worker handlers, moto's
SQS, a real Postgres. Each tool call is one SQS-delivered step that replays the JavaScript from the
transcript; the worker holds nothing between them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cloud.test_cloud_path import all_terminal, call, events_of, queue_is_empty, run_rows, start_run
from tests.support.lambda_sim import EventSourceMapping, LambdaEnv

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


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cloudcode") / "treadle.yaml"
    path.write_text(yaml.safe_dump({
        "code_agents": {"enabled": True},
        "agents": {"counter": {"provider": "code-js", "tools": ["Memory"], "code": CODE}},
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
