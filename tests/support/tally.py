"""A transactional tool for the exactly-once tests (tests/integration: test_exactly_once,
test_code_agents): `Tally` adds 1 to the agent's `tally` in Memory — inside the step's
transaction — and can then die as a kill -9 would (`Crash`) or fail, on the calls a test names."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from treadle.errors import ToolError
from treadle.runtime import Runtime
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult


class Crash(BaseException):
    """What a kill -9 looks like from inside the step: nothing after it runs."""


class Tally:
    """Adds 1 to the agent's `tally` in Memory and answers `{"tally": n}` (with the input's `i`
    when it has one). After the write, its `crash_at`-th invocations (1-based, re-runs counted)
    raise `Crash` and its `fail_at`-th a ToolError; an input `{"fail": why}` is refused likewise."""

    name = "Tally"
    description = "count"
    input_schema: dict[str, Any] = {"type": "object"}
    effects: ToolEffects = "transactional"

    def __init__(self, *, crash_at: Iterable[int] = (), fail_at: Iterable[int] = ()) -> None:
        self.invocations = 0
        self.crash_at = set(crash_at)
        self.fail_at = set(fail_at)

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        self.invocations += 1
        value = await ctx.services.memory.incr(ctx.tenant_id, "agent", ctx.agent, "tally", 1, None)
        if self.invocations in self.crash_at:
            raise Crash
        if self.invocations in self.fail_at:
            raise ToolError("Tally: failed after writing")
        if args.get("fail"):
            raise ToolError(f"Tally refused {args['fail']}")
        return ToolResult.json({"tally": value, **({"i": args["i"]} if "i" in args else {})})

    @staticmethod
    async def count(rt: Runtime, tenant: str, agent: str) -> int | None:
        """The agent's committed tally (None: no write ever committed)."""
        found, value = await rt.memory.get(tenant, "agent", agent, "tally")
        return int(value) if found else None
