"""Logs that tell (issue 43 item 6): TREADLE_LOG_LEVEL sets treadle's loggers; a served run writes
one INFO line when it starts and one when it ends (status, agent, tenant, steps, iterations,
tokens, duration); the
sidecar writes one access line per request — without the query string or any header, where
tokens travel."""

from __future__ import annotations

import logging
import secrets
from pathlib import Path

import httpx
import pytest
from treadle_sidecar.server import BackgroundServer

from tests.support.db import TEST_HOME
from treadle.config import Settings, parse_config
from treadle.errors import ConfigError
from treadle.telemetry.logs import configure_logging
from treadle.testing import ACCEPT_JSON, until


def test_treadle_log_level_sets_treadles_loggers(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        monkeypatch.setenv("TREADLE_LOG_LEVEL", "error")
        configure_logging(logging.WARNING)
        assert logging.getLogger("treadle").level == logging.ERROR
        assert logging.getLogger("treadle.audit").level == logging.INFO  # the documented audit lines stay
        monkeypatch.setenv("TREADLE_LOG_LEVEL", "loud")
        with pytest.raises(ConfigError, match="TREADLE_LOG_LEVEL must be one of"):
            configure_logging(logging.WARNING)
        monkeypatch.delenv("TREADLE_LOG_LEVEL")
        configure_logging(logging.WARNING)
        assert logging.getLogger("treadle").level == logging.INFO  # the default
        assert logging.getLogger().level == logging.WARNING  # other libraries stay quiet
    finally:
        logging.getLogger("treadle").setLevel(logging.NOTSET)


async def test_a_served_run_logs_its_start_end_and_requests(db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="treadle")
    token = "tok-" + secrets.token_hex(12)
    settings = Settings(database_url=db_url, home=TEST_HOME, config=Path("unused.yaml"), workers=2,
                        auth_token=token, sweep_interval_seconds=30.0)
    server = BackgroundServer(settings, parse_config({"agents": {"echo": {"model": "echo"}}}))
    base = await server.start()
    try:
        async with httpx.AsyncClient(base_url=base, timeout=20.0,
                                     headers={**ACCEPT_JSON, "Authorization": f"Bearer {token}"}) as c:
            resp = await c.post(f"/v1/runs?note={token}", json={"agent": "echo", "prompt": "hi", "user_id": "ada"})
            assert resp.status_code == 202, resp.text
            run_id = resp.json()["run_id"]

            async def ended() -> bool:
                return bool((await c.get(f"/v1/runs/{run_id}")).json()["status"] == "completed")

            await until(ended, timeout=20, what="the run to complete")
            run = (await c.get(f"/v1/runs/{run_id}")).json()
    finally:
        await server.stop()
    lines = [(r.name, r.getMessage()) for r in caplog.records]
    assert ("treadle.runs", f"run {run_id} started: agent=echo tenant=default user=ada") in lines
    [end] = [m for n, m in lines if n == "treadle.runs" and m.startswith(f"run {run_id} ended:")]
    assert "status=completed agent=echo tenant=default steps=1 iterations=1 " in end
    # the run's own totals, as its final commit left them (input counts cache writes and reads)
    usage = run["usage"]
    tokens_in = usage["input_tokens"] + usage["cache_creation_input_tokens"] + usage["cache_read_input_tokens"]
    assert run["iterations"] == 1 and tokens_in > 0 and usage["output_tokens"] > 0, run
    assert f" tokens_in={tokens_in} tokens_out={usage['output_tokens']} duration_s=" in end, end
    access = [m for n, m in lines if n == "treadle.access"]
    assert any(m.startswith("POST /v1/runs 202 ") for m in access), access
    assert any(m.startswith(f"GET /v1/runs/{run_id} 200 ") for m in access), access
    assert not [m for _, m in lines if token in m]  # neither the bearer nor the query string
