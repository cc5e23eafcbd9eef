"""`python -m treadle_cloud.doctor --stack NAME`: the stack's output names the migrate function
(moto's CloudFormation), and the function is invoked through boto3's real Lambda client — served
here by a loopback HTTP server speaking Lambda's Invoke API that runs the real handler module."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support.lambda_sim import FakeContext, load_handler_module
from treadle_cloud import doctor


@pytest.fixture
def lambda_endpoint(monkeypatch: pytest.MonkeyPatch, aws: dict[str, str]) -> Iterator[list[str]]:
    """POST /2015-03-31/functions/{name}/invocations → the migrate handler; records the names."""
    handler = load_handler_module("migrate").handler
    invoked: list[str] = []

    class Invoke(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            invoked.append(self.path.split("/")[3])
            event = json.loads(self.rfile.read(int(self.headers["content-length"])) or b"{}")
            headers = {"content-type": "application/json"}
            try:
                body: Any = handler(event, FakeContext("treadle-migrate"))
            except Exception as exc:
                body = {"errorType": type(exc).__name__, "errorMessage": str(exc)}
                headers["X-Amz-Function-Error"] = "Unhandled"
            data = json.dumps(body).encode()
            self.send_response(200)
            for k, v in {**headers, "content-length": str(len(data))}.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Invoke)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL_LAMBDA", f"http://127.0.0.1:{server.server_address[1]}")
    yield invoked
    server.shutdown()
    server.server_close()


@pytest.fixture
def stack(aws: dict[str, str], request: pytest.FixtureRequest) -> str:
    import boto3

    name = f"Treadle-{abs(hash(request.node.name)) % 10**8}"
    template = {
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {"MigrateFunctionName": {"Value": f"{name}-MigrateFunction-abc"}},
    }
    boto3.client("cloudformation").create_stack(StackName=name, TemplateBody=json.dumps(template))
    return name


@pytest.fixture
def db_url(db_without_pgvector: str) -> str:
    """A migrated database on a server without pgvector (the doctor's WARN and FAIL lines)."""
    import asyncio

    from treadle.store.migrate import migrate

    asyncio.run(migrate(db_without_pgvector))
    return db_without_pgvector


def test_doctor_for_a_stack_prints_the_functions_lines(
    stack: str, lambda_endpoint: list[str], db_url: str, config_file: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("DATABASE_URL", db_url)
    monkeypatch.setenv("TREADLE_CONFIG", str(config_file))
    monkeypatch.setenv("TREADLE_REQUIRE_PGVECTOR", "false")
    assert doctor.main(["--stack", stack]) == 0
    out = capsys.readouterr().out.splitlines()
    assert lambda_endpoint == [f"{stack}-MigrateFunction-abc"]
    assert any(line.startswith("PASS") and "migrations applied" in line for line in out)
    assert any(line.startswith("WARN") and "pgvector" in line for line in out)
    # the stack's default requires pgvector: this server has none, so the doctor fails
    monkeypatch.setenv("TREADLE_REQUIRE_PGVECTOR", "true")
    assert doctor.main(["--stack", stack]) == 1
    assert any(line.startswith("FAIL") and "pgvector" in line for line in capsys.readouterr().out.splitlines())


def test_a_stack_without_the_output_is_named(stack: str, aws: dict[str, str]) -> None:
    import boto3

    cfn = boto3.client("cloudformation")
    cfn.create_stack(StackName=f"{stack}-old", TemplateBody=json.dumps(
        {"Resources": {"Queue": {"Type": "AWS::SQS::Queue"}}}))
    with pytest.raises(SystemExit, match="has no MigrateFunctionName output"):
        doctor.main(["--stack", f"{stack}-old"])
