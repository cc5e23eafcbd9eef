"""Log records of a step carry its run: JSON lines with run_id, step_no, tenant and the span's
trace/span ids (TREADLE_LOG_FORMAT=json); text by default; a bad format is refused."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from treadle.errors import ConfigError
from treadle.providers.base import ModelRequest
from treadle.store.runs import NewRun
from treadle.telemetry.logs import configure_logging, log_format, make_handler
from treadle.testing import ScriptedProvider, open_test_runtime, user_text


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    out = io.StringIO()
    handler = make_handler("json", out)
    logger = logging.getLogger("treadle")
    logger.addHandler(handler)
    try:
        yield out
    finally:
        logger.removeHandler(handler)


def broken_driver(req: ModelRequest) -> Any:
    raise RuntimeError("driver bug")


async def test_a_steps_log_lines_carry_its_run(db_url: str, json_lines: io.StringIO,
                                               spans: InMemorySpanExporter) -> None:
    agents = {"a": {"provider": "scripted", "model": "echo"}}
    async with open_test_runtime(agents, database_url=db_url, providers=[ScriptedProvider(broken_driver)]) as (rt, d):
        run, _ = await rt.start_run(NewRun(tenant_id="default", agent="a", segments=user_text("hi")))
        await d.drain()
    lines = [json.loads(line) for line in json_lines.getvalue().splitlines()]
    mine = [r for r in lines if r.get("run_id") == run.id]
    assert mine, lines
    record = next(r for r in mine if "outside its error contract" in r["message"])
    assert record["level"] == "error" and record["logger"] == "treadle.engine"
    assert (record["step_no"], record["tenant"]) == (0, "default")
    (step,) = [s for s in spans.get_finished_spans() if s.name == "step a"]
    assert record["trace_id"] == format(step.context.trace_id, "032x")
    assert record["span_id"] == format(step.context.span_id, "016x")  # logged by the step
    assert "RuntimeError" in record["exception"]


def test_text_by_default_json_when_asked_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TREADLE_LOG_FORMAT", raising=False)
    assert log_format() == "text"
    monkeypatch.setenv("TREADLE_LOG_FORMAT", "JSON")
    assert log_format() == "json"
    monkeypatch.setenv("TREADLE_LOG_FORMAT", "xml")
    with pytest.raises(ConfigError, match="TREADLE_LOG_FORMAT"):
        configure_logging()


def test_text_lines_name_the_run() -> None:
    out = io.StringIO()
    handler = make_handler("text", out)
    logger = logging.getLogger("treadle.test.text")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        from treadle.telemetry.logs import log_fields

        with log_fields(run_id="r_1", step_no=2, tenant="t"):
            logger.warning("inside")
        logger.warning("outside")
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    assert out.getvalue().splitlines() == ["WARNING treadle.test.text: inside [r_1#2]",
                                           "WARNING treadle.test.text: outside"]


def test_the_audit_lines_appear_at_the_warning_level(monkeypatch: pytest.MonkeyPatch) -> None:
    root, audit = logging.getLogger(), logging.getLogger("treadle.audit")
    saved = (root.level, list(root.handlers), audit.level)
    monkeypatch.setenv("TREADLE_LOG_LEVEL", "warning")
    try:
        audit.setLevel(logging.NOTSET)
        configure_logging(logging.WARNING)
        assert not logging.getLogger("treadle.engine").isEnabledFor(logging.INFO)
        assert audit.isEnabledFor(logging.INFO)  # docs/openai.md: one line per call without a run
    finally:
        root.setLevel(saved[0])
        root.handlers[:] = saved[1]
        audit.setLevel(saved[2])
        logging.getLogger("treadle").setLevel(logging.NOTSET)
