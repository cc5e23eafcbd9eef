"""loomcycle's `concurrency:` as admission caps (issue 39 item 4): a tenant's live runs (queued or
running) at `max_concurrent_runs + max_queue_depth` refuse a new top-level run with 429
`backpressure`; a user at `max_concurrent_runs_per_user` gets 429 `per_user_quota_exhausted` with
loomcycle's body (`user_id`, `cap`) and `Retry-After: 5`. Once runs end, runs start again; another
tenant is not affected; parked runs do not count. loomcycle's per-provider queue keys are refused."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.substrate import client_for, substrate_runtime
from treadle.config import parse_config
from treadle.errors import Backpressure, ConfigError
from treadle.store.runs import NewRun
from treadle.testing import user_text

CONFIG: dict[str, Any] = {
    "concurrency": {"max_concurrent_runs": 1, "max_queue_depth": 1, "queue_timeout_ms": 30000,
                    "max_concurrent_runs_per_user": 1},
    "agents": {"echo": {"model": "echo"}},
}


async def test_admission_caps_answer_loomcycles_429s(db_url: str) -> None:
    async with substrate_runtime(db_url, CONFIG) as (rt, disp), client_for(rt) as client:
        async def start(user: str) -> Any:
            return await client.post("/v1/runs", json={"agent": "echo", "prompt": "hi", "user_id": user})

        assert (await start("ada")).status_code == 202  # queued: the inline dispatcher has not run it
        busy = await start("ada")
        assert busy.status_code == 429 and busy.headers["retry-after"] == "5", busy.text
        assert busy.json() == {"code": "per_user_quota_exhausted", "error": busy.json()["error"],
                               "user_id": "ada", "cap": 1}
        assert (await start("bob")).status_code == 202
        full = await start("cy")
        assert full.status_code == 429 and full.json()["code"] == "backpressure", full.text
        # another tenant has its own count
        other, _ = await rt.start_run(NewRun(tenant_id="t_other", agent="echo", segments=user_text("x"),
                                             user_id="ada"))
        assert other.status == "queued"
        with pytest.raises(Backpressure):
            await rt.start_run(NewRun(tenant_id="t_other", agent="echo", segments=user_text("x"), user_id="ada"))
        await disp.drain()  # the runs end: nothing queued or running
        assert (await start("cy")).status_code == 202


def test_the_per_provider_queue_keys_are_refused() -> None:
    with pytest.raises(ConfigError, match="provider_queue_depth: not supported by treadle"):
        parse_config({"concurrency": {"max_concurrent_runs": 4, "provider_queue_depth": 8},
                      "agents": {"a": {"model": "echo"}}})
    assert parse_config({"concurrency": {"max_concurrent_runs": 4, "max_queue_depth": 8, "queue_timeout_ms": 30000},
                         "agents": {"a": {"model": "echo"}}}).concurrency is not None
