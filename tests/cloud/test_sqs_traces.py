"""One run, one trace, across Lambdas (issue 17): the API function starts a run, two worker
environments take its steps from moto's SQS in turn, and every step message carries the trace
context in its `traceparent` message attribute — the run's request, the run, its four steps and
their model and tool calls are one trace, each step linked to the span that sent its message."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.lambda_sim import LambdaEnv, http_event, sqs_event
from tests.support.localcloud import API_TOKEN
from tests.support.spans import attrs, by_trace, leaked, recording_spans, tree


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    from treadle_cloud.metrics import uninstall

    with recording_spans() as exporter:
        try:
            yield exporter
        finally:
            uninstall()  # the functions installed the EMF sink: back to the process defaults


def emf_documents(out: str) -> list[dict[str, Any]]:
    docs = [json.loads(line) for line in out.splitlines() if line.startswith('{"_aws"')]
    return [d for d in docs if d["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "treadle"]


def emf_values(docs: list[dict[str, Any]], name: str) -> list[float]:
    out: list[float] = []
    for d in docs:
        if name in d:
            out += d[name] if isinstance(d[name], list) else [d[name]]
    return out


def lambda_attributes(attrs: dict[str, Any]) -> dict[str, Any]:
    """ReceiveMessage's MessageAttributes as Lambda's SQS event spells them."""
    return {k: {"stringValue": v.get("StringValue"), "dataType": v["DataType"]} for k, v in attrs.items()}


def test_steps_on_two_lambdas_are_one_trace(
    cloud_env: dict[str, str], sqs: Any, queue: dict[str, str], spans: InMemorySpanExporter,
    capsys: pytest.CaptureFixture[str],
) -> None:
    api, workers = LambdaEnv("api"), [LambdaEnv("worker"), LambdaEnv("worker")]
    try:
        resp = api.invoke(http_event("POST", "/v1/runs", headers={"authorization": f"Bearer {API_TOKEN}"},
                                     body={"agent": "calc", "prompt": "PROMPT-feed-1234"}))
        assert resp["statusCode"] == 202, resp
        assert json.loads(resp["body"])["run_id"]
        carried: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60
        while len([c for c in carried if c]) < 4 or _pending(sqs, queue["url"]):
            assert time.monotonic() < deadline, f"{len(carried)} message(s) delivered"
            got = sqs.receive_message(QueueUrl=queue["url"], MaxNumberOfMessages=1, MessageAttributeNames=["All"],
                                      MessageSystemAttributeNames=["All"]).get("Messages", [])
            if not got:
                time.sleep(0.1)
                continue
            event = sqs_event(got, queue["arn"])
            event["Records"][0]["messageAttributes"] = lambda_attributes(got[0].get("MessageAttributes", {}))
            carried.append(got[0].get("MessageAttributes", {}))
            result = workers[len(carried) % 2].invoke(event)
            assert result == {"batchItemFailures": []}, result
            sqs.delete_message(QueueUrl=queue["url"], ReceiptHandle=got[0]["ReceiptHandle"])
        results = [w.handler.results for w in workers]
    finally:
        api.close()
        for w in workers:
            w.close()

    assert sum(r.get("continued", 0) for r in results) == 3 and sum(r.get("finished", 0) for r in results) == 1
    assert all(r.get("continued", 0) + r.get("finished", 0) == 2 for r in results)  # two steps each
    finished = spans.get_finished_spans()
    (run_span,) = [s for s in finished if s.name == "invoke_agent calc"]
    trace_id = run_span.context.trace_id
    # every step message carried the run's trace in its attributes
    assert len(carried) == 4
    assert [c["traceparent"]["DataType"] for c in carried] == ["String"] * 4
    assert {int(c["traceparent"]["StringValue"].split("-")[1], 16) for c in carried} == {trace_id}

    trace_spans = by_trace(finished)[trace_id]
    assert tree(trace_spans) == sorted([
        ("POST /v1/runs", None),
        ("invoke_agent calc", "POST /v1/runs"),
        *[("step calc", "invoke_agent calc")] * 4,
        *[("chat tool-caller", "step calc")] * 4,
        *[("execute_tool Memory", "step calc")] * 3,
    ])
    steps = sorted((s for s in trace_spans if s.name == "step calc"), key=lambda s: attrs(s)["treadle.step_no"])
    assert len({attrs(s)["treadle.worker"] for s in steps}) == 2  # two Lambda environments
    # each step links to the span that sent its message: the request, then the step before it
    (request,) = [s for s in trace_spans if s.name == "POST /v1/runs"]
    senders = [request, *steps[:-1]]
    assert [[link.context.span_id for link in s.links] for s in steps] == [[p.context.span_id] for p in senders]
    assert leaked(finished, ["PROMPT-feed-1234", "calls"]) == []

    # the same counters as CloudWatch EMF, written by the worker functions after each invocation
    docs = emf_documents(capsys.readouterr().out)
    assert len(emf_values(docs, "StepDuration")) == 4
    assert sum(emf_values(docs, "ToolCalls")) == 3
    assert len(emf_values(docs, "ModelCallDuration")) == 4
    step_docs = [d for d in docs if "StepDuration" in d]
    assert {d["result"] for d in step_docs} == {"continued", "finished"}
    assert {d["service"] for d in step_docs} == {"treadle"}
    # the run's end, by status: what the stack's FailedRunsAlarm reads (infra/treadle_infra/runtime.py)
    ended = [d for d in docs if "RunsFinished" in d]
    assert [(d["status"], d["service"]) for d in ended] == [("completed", "treadle")]
    assert emf_values(ended, "RunsFinished") == [1.0]


def _pending(sqs: Any, url: str) -> bool:
    attrs = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return bool(attrs["ApproximateNumberOfMessages"] != "0" or attrs["ApproximateNumberOfMessagesNotVisible"] != "0")


def test_json_logs_in_the_functions_are_powertools_lines_with_the_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from treadle.telemetry.logs import log_fields
    from treadle_cloud.metrics import install, uninstall

    monkeypatch.setenv("TREADLE_LOG_FORMAT", "json")
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "treadle-worker")
    monkeypatch.setenv("TREADLE_EMF", "off")
    uninstall()  # a handler invoked earlier in this process installed without JSON logs
    install()
    try:
        with log_fields(run_id="r_abc", step_no=4, tenant="acme"):
            logging.getLogger("treadle.engine").warning("lease renewal for %s failed", "r_abc")
    finally:
        uninstall()
    (line,) = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    assert line["service"] == "treadle-worker" and line["level"] == "WARNING"
    assert (line["run_id"], line["step_no"], line["tenant"]) == ("r_abc", 4, "acme")
    assert line["message"] == "lease renewal for r_abc failed"
    assert logging.getLogger("treadle").propagate  # uninstalled
