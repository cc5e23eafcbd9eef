"""loomcycle's `user_tiers.<name>.retry_attempts` (issue 39 item 4): the same-provider retry budget
of a run of that user tier — a provider that always answers 429 is retried that many times (one
`retry` event each) before the run fails; a tier without it keeps the provider's own budget."""

from __future__ import annotations

from typing import Any

from tests.support.substrate import substrate_runtime
from treadle.domain.events import EventType
from treadle.domain.runs import RunOptions
from treadle.store.runs import NewRun
from treadle.testing import user_text

CONFIG: dict[str, Any] = {
    "tiers": {"main": [{"provider": "mock", "model": "echo"}]},
    "user_tiers": {"default": {}, "patient": {"retry_attempts": 3}, "strict": {"retry_attempts": 0}},
    "agents": {"flaky": {"tier": "main", "mock": {"error_rate": 1.0}}},
}


async def _retries(rt: Any, disp: Any, user_tier: str | None) -> int:
    run, _ = await rt.start_run(NewRun(tenant_id="t_retry", agent="flaky", segments=user_text("go"),
                                       run_options=RunOptions(user_tier=user_tier)))
    await disp.drain()
    done = await rt.runs.get("t_retry", run.id)
    assert done is not None and done.status == "failed", done
    return sum(1 for e in await rt.runs.events("t_retry", run.id) if e.type == EventType.RETRY)


async def test_each_user_tier_retries_its_own_budget(db_url: str) -> None:
    async with substrate_runtime(db_url, CONFIG, provider_retries=1) as (rt, disp):
        assert await _retries(rt, disp, "patient") == 3
        assert await _retries(rt, disp, "strict") == 0
        assert await _retries(rt, disp, None) == 1  # `default` names none: the runtime's provider_retries
