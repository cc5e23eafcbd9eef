"""Evaluation: scores for runs, attributed to the AgentDef each run ran with.

Ops (tool input shape, also the body of POST /v1/_evaluation):
  submit        {run_id, score, dimensions?{name: number}, judgement? (any JSON ≤ 32 KiB), rationale?}
  get           {eval_id}
  list_for_run  {run_id, limit?}
  list_for_def  {def_id | name, include_lineage?, limit?}
  aggregate     {def_id | name, include_lineage?} → per def: count, mean, min, max, dimension means

Through the tool the caller's `evaluation_scopes` decide (empty = deny): submit_self (its own
run), submit_descendants (runs it started, at any depth), submit_any, read_any. Without read_any
an agent reads the evaluations of runs it may submit for, and those of its own def. Selection
stays policy: nothing here promotes anything.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from treadle.errors import DefRefused, NotFound, RunNotFound
from treadle.store.defs import DefStore
from treadle.store.evaluations import EvaluationRecord, EvaluationStore
from treadle.store.runs import RunStore

OPS = ("submit", "get", "list_for_run", "list_for_def", "aggregate")
DIMENSION = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
MAX_DIMENSIONS = 32
MAX_RATIONALE = 16 * 1024
MAX_JUDGEMENT_BYTES = 32 * 1024  # loomcycle's EvaluationMaxJudgementBytes default
MAX_ANCESTRY = 16


@dataclass(frozen=True, slots=True)
class EvalGate:
    """The calling agent (tool path): its scopes, run, name and def."""

    scopes: tuple[str, ...]
    run_id: str
    agent: str
    def_id: str | None


def _refuse(op: str, why: str) -> DefRefused:
    return DefRefused(f"Evaluation.{op}: {why}")


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and abs(v) <= 1e9


class EvaluationService:
    label = "Evaluation"

    def __init__(self, store: EvaluationStore, runs: RunStore, defs: DefStore) -> None:
        self.store = store
        self.runs = runs
        self.defs = defs

    async def dispatch(
        self, tenant: str, args: Any, *, gate: EvalGate | None = None, run_id: str | None = None
    ) -> dict[str, Any]:
        if not isinstance(args, dict):
            raise DefRefused("Evaluation: the input must be a JSON object")
        op = args.get("op")
        if op not in OPS:
            raise DefRefused(f"Evaluation: op must be one of {', '.join(OPS)}")
        if gate is not None and not gate.scopes:
            raise _refuse(op, "denied — the agent's evaluation_scopes is empty (default-deny)")
        handler = getattr(self, f"op_{op}")
        result: dict[str, Any] = await handler(tenant, args, gate)
        return result

    # -- ops ----------------------------------------------------------------------------------------

    async def op_submit(self, tenant: str, args: dict[str, Any], gate: EvalGate | None) -> dict[str, Any]:
        run = await self._run(tenant, args, "submit")
        role = "external" if gate is None else await self._relation(tenant, gate.run_id, run.id)
        if gate is not None and not self._may_submit(gate, role):
            needed = {"self": "submit_self or submit_any", "parent": "submit_descendants or submit_any"}
            raise _refuse("submit", f"a {role} evaluation of run {run.id!r} needs evaluation_scopes "
                          f"{needed.get(role, 'submit_any')} (has: {', '.join(gate.scopes)})")
        score = args.get("score")
        if not isinstance(score, int | float) or not _number(score):
            raise _refuse("submit", "score (a finite number) is required")
        dims = args.get("dimensions") or {}
        if not isinstance(dims, dict) or len(dims) > MAX_DIMENSIONS:
            raise _refuse("submit", f"dimensions must be an object of at most {MAX_DIMENSIONS} numbers")
        for name, value in dims.items():
            if not DIMENSION.match(str(name)) or not _number(value):
                raise _refuse("submit", f"dimension {name!r} must be named [A-Za-z0-9_.:-]{{1,64}} and be a number")
        judgement = args.get("judgement")  # free-form JSON, as loomcycle's (a string still works)
        if judgement is not None and len(json.dumps(judgement).encode()) > MAX_JUDGEMENT_BYTES:
            raise _refuse("submit", f"judgement must be JSON of at most {MAX_JUDGEMENT_BYTES} bytes")
        rationale = args.get("rationale") or ""
        if not isinstance(rationale, str) or len(rationale) > MAX_RATIONALE:
            raise _refuse("submit", f"rationale must be a string of at most {MAX_RATIONALE} characters")
        record = await self.store.insert({
            "tenant_id": tenant, "run_id": run.id, "agent": run.agent, "def_id": run.def_id,
            "def_content_sha256": run.def_content_sha256, "score": float(score),
            "dimensions": {str(k): float(v) for k, v in dims.items()}, "judgement": judgement,
            "rationale": rationale, "emitter_role": role, "emitter_agent": gate.agent if gate else None,
            "emitter_run_id": gate.run_id if gate else None,
        })
        return record.to_api()

    async def op_get(self, tenant: str, args: dict[str, Any], gate: EvalGate | None) -> dict[str, Any]:
        eval_id = args.get("eval_id")
        if not isinstance(eval_id, str) or not eval_id:
            raise _refuse("get", "eval_id is required")
        record = await self.store.get(tenant, eval_id)
        if record is None or (gate is not None and not await self._may_read_run(tenant, gate, record)):
            raise NotFound(f"evaluation {eval_id!r} not found")
        return record.to_api()

    async def op_list_for_run(self, tenant: str, args: dict[str, Any], gate: EvalGate | None) -> dict[str, Any]:
        run = await self._run(tenant, args, "list_for_run")
        if gate is not None and "read_any" not in gate.scopes:
            role = await self._relation(tenant, gate.run_id, run.id)
            if not self._may_submit(gate, role) and not (gate.def_id and gate.def_id == run.def_id):
                raise _refuse("list_for_run", f"run {run.id!r} is outside this agent's evaluation_scopes")
        records = await self.store.list(tenant, run_id=run.id, limit=self._limit(args))
        return {"run_id": run.id, "evaluations": [r.to_api() for r in records], "count": len(records)}

    async def op_list_for_def(self, tenant: str, args: dict[str, Any], gate: EvalGate | None) -> dict[str, Any]:
        target = await self._target(tenant, args, gate, "list_for_def")
        records = await self.store.list(tenant, def_ids=target.get("def_ids"), agent=target.get("agent"),
                                        limit=self._limit(args))
        return {**target["echo"], "evaluations": [r.to_api() for r in records], "count": len(records)}

    async def op_aggregate(self, tenant: str, args: dict[str, Any], gate: EvalGate | None) -> dict[str, Any]:
        target = await self._target(tenant, args, gate, "aggregate")
        rows = await self.store.aggregate(tenant, def_ids=target.get("def_ids"), agent=target.get("agent"))
        versions = target.get("versions", {})
        for row in rows:
            row.update(versions.get(row["def_id"], {}))
        count = sum(r["count"] for r in rows)
        mean = sum(r["mean"] * r["count"] for r in rows) / count if count else None
        overall = {"count": count, "mean": None if mean is None else round(mean, 6)}
        return {**target["echo"], "defs": rows, "overall": overall}

    # -- helpers ------------------------------------------------------------------------------------

    async def _target(self, tenant: str, args: dict[str, Any], gate: EvalGate | None, op: str) -> dict[str, Any]:
        """def_id (+ lineage) or agent name → what to filter on, and what to echo back."""
        def_id, name = args.get("def_id"), args.get("name")
        lineage = args.get("include_lineage", False)
        if not isinstance(lineage, bool):
            raise _refuse(op, "include_lineage must be a boolean")
        if isinstance(def_id, str) and def_id:
            if gate is not None and "read_any" not in gate.scopes and def_id != gate.def_id:
                raise _refuse(op, "reading another def's evaluations needs evaluation_scopes read_any")
            records = (await self.defs.lineage(tenant, "agent", def_id) if lineage
                       else [r for r in [await self.defs.get(tenant, "agent", def_id=def_id)] if r])
            if not records:
                raise NotFound(f"AgentDef {def_id!r} not found")
            versions = {r.def_id: {"name": r.name, "version": r.version, "content_sha256": r.content_sha256}
                        for r in records}
            return {"def_ids": [r.def_id for r in records], "versions": versions,
                    "echo": {"def_id": def_id, "include_lineage": lineage}}
        if isinstance(name, str) and name:
            if gate is not None and "read_any" not in gate.scopes and name != gate.agent:
                raise _refuse(op, "reading another agent's evaluations needs evaluation_scopes read_any")
            versions = {r.def_id: {"name": r.name, "version": r.version, "content_sha256": r.content_sha256}
                        for r in await self.defs.list(tenant, "agent", name=name, include_retired=True, limit=1000)}
            return {"agent": name, "versions": versions, "echo": {"name": name}}
        raise _refuse(op, "def_id or name (an agent) is required")

    async def _run(self, tenant: str, args: dict[str, Any], op: str) -> Any:
        run_id = args.get("run_id")
        if not isinstance(run_id, str) or not run_id:
            raise _refuse(op, "run_id is required")
        run = await self.runs.get(tenant, run_id)
        if run is None:
            raise RunNotFound(f"run {run_id!r} not found")
        return run

    async def _relation(self, tenant: str, caller_run: str, run_id: str) -> str:
        """self | parent (the caller started it, at any depth) | unrelated."""
        if caller_run == run_id:
            return "self"
        current = run_id
        for _ in range(MAX_ANCESTRY):
            run = await self.runs.get(tenant, current)
            if run is None or run.parent_run_id is None:
                return "unrelated"
            if run.parent_run_id == caller_run:
                return "parent"
            current = run.parent_run_id
        return "unrelated"

    @staticmethod
    def _may_submit(gate: EvalGate, role: str) -> bool:
        needed = {"self": "submit_self", "parent": "submit_descendants"}.get(role)
        return "submit_any" in gate.scopes or (needed is not None and needed in gate.scopes)

    async def _may_read_run(self, tenant: str, gate: EvalGate, record: EvaluationRecord) -> bool:
        if "read_any" in gate.scopes or (gate.def_id is not None and record.def_id == gate.def_id):
            return True
        return self._may_submit(gate, await self._relation(tenant, gate.run_id, record.run_id))

    @staticmethod
    def _limit(args: dict[str, Any]) -> int:
        limit = args.get("limit", 100)
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 1000:
            raise DefRefused("limit must be an integer in 1..1000")
        return limit
