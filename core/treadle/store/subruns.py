"""Sub-agent runs: a parent's children, cancelling a run's subtree, and the sweeper's check for
parents whose wake-up was lost.

A child run carries `parent_run_id`, `root_run_id`, `depth` and `parent_wait_key` (the key its
parent's `Agent` call parks on). Its idempotency key is derived from (parent run, tool_use_id,
index), so re-invoking the call after a crash finds the children it already created.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from treadle.domain.events import EventType
from treadle.store.db import Pool

TERMINAL = ("completed", "failed", "cancelled")
OUTPUT_CAP = 32_000  # characters of a child's final text carried into the parent's result


def spawn_wait_key(parent_run_id: str, tool_use_id: str) -> str:
    return f"agent:{parent_run_id}:{tool_use_id}"


def child_idempotency_key(parent_run_id: str, tool_use_id: str, index: int) -> str:
    return f"agent:{parent_run_id}:{tool_use_id}:{index}"


@dataclass(slots=True)
class Child:
    index: int
    run_id: str
    agent: str
    status: str
    stop_reason: str | None = None
    error: dict[str, Any] | None = None
    cancel_reason: str | None = None
    output: str | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def result(self) -> dict[str, Any]:
        """The `{index, agent, ok, output?, error?}` entry (plus run_id and stop_reason)."""
        out: dict[str, Any] = {"index": self.index, "agent": self.agent, "run_id": self.run_id,
                               "ok": self.status == "completed", "stop_reason": self.stop_reason}
        if self.status == "completed":
            text = self.output or ""
            out["output"] = text if len(text) <= OUTPUT_CAP else text[:OUTPUT_CAP] + "\n[truncated]"
        elif self.status == "cancelled":
            out["error"] = f"cancelled: {self.cancel_reason or 'cancelled'}"
        else:
            err = self.error or {}
            code, msg = err.get("code"), err.get("error")
            out["error"] = f"{code}: {msg}" if code and msg else str(msg or code or "failed")
        return out


class SubRunStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def lineage(self, tenant_id: str, run_id: str) -> tuple[int, str]:
        """(depth, root_run_id) of a run."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT depth, coalesce(root_run_id, id) AS root FROM runs WHERE id = %s AND tenant_id = %s",
                (run_id, tenant_id),
            )
            row = await cur.fetchone()
        if row is None:
            raise LookupError(f"run {run_id!r} not found")
        return int(row["depth"]), str(row["root"])

    async def children(self, tenant_id: str, parent_run_id: str, wait_key: str) -> dict[int, Child]:
        """The children one `Agent` call created, by index, with the final text of finished ones."""
        sql = f"""
        SELECT c.id, c.agent, c.status, c.stop_reason, c.error, c.cancel_reason, c.idempotency_key,
               CASE WHEN c.status = 'completed' THEN (
                   SELECT e.payload->>'text' FROM events e
                   WHERE e.run_id = c.id AND e.type = '{EventType.TEXT}' ORDER BY e.seq DESC LIMIT 1)
               END AS output
        FROM runs c
        WHERE c.parent_run_id = %s AND c.tenant_id = %s AND c.parent_wait_key = %s
        """
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, (parent_run_id, tenant_id, wait_key))
            rows = await cur.fetchall()
        out: dict[int, Child] = {}
        for r in rows:
            suffix = str(r["idempotency_key"] or "").rsplit(":", 1)[-1]
            if not suffix.isdigit():
                continue
            index = int(suffix)
            out[index] = Child(index, r["id"], r["agent"], r["status"], r["stop_reason"], r["error"],
                               r["cancel_reason"], r["output"])
        return out

    async def request_cancel_tree(
        self, tenant_id: str, run_id: str, reason: str, *, include_root: bool = True,
        child_reason: str = "parent run cancelled", keep_residents: bool = False,
    ) -> list[tuple[str, int]]:
        """Flag the run (unless `include_root` is false) and every unfinished descendant for
        cancellation, in one statement. Returns (run_id, step_no) of the flagged runs: each needs
        a step message so its next step finishes it (a parked run is leased just for that).
        `keep_residents`: the run's resident sub-agents (interactive children) and their subtrees
        are left alone (a turn cancel)."""
        sql = """
        WITH RECURSIVE tree AS (
            SELECT id, 0 AS lvl FROM runs WHERE id = %(id)s AND tenant_id = %(tenant)s
            UNION ALL
            SELECT c.id, tree.lvl + 1 FROM runs c JOIN tree ON c.parent_run_id = tree.id
            WHERE c.tenant_id = %(tenant)s AND tree.lvl < 16 AND NOT (%(keep)s AND c.interactive)
        )
        UPDATE runs SET cancel_requested = true,
               cancel_reason = CASE WHEN runs.id = %(id)s THEN %(reason)s
                                    WHEN runs.cancel_requested THEN runs.cancel_reason
                                    ELSE %(child_reason)s END,
               updated_at = now()
        FROM tree
        WHERE runs.id = tree.id AND runs.status NOT IN ('completed','failed','cancelled')
          AND (%(root)s OR tree.lvl > 0)
        RETURNING runs.id, runs.step_no, pg_notify('treadle_cancel', runs.id) AS _n  -- see store/cancels.py
        """
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, {"id": run_id, "tenant": tenant_id, "reason": reason, "root": include_root,
                                     "child_reason": child_reason, "keep": keep_residents})
            rows = await cur.fetchall()
        return [(r["id"], int(r["step_no"])) for r in rows]

    async def settled_parent_waits(self, limit: int = 500) -> list[tuple[str, str]]:
        """(tenant_id, key) of `Agent` waits whose children are all finished although the parent
        is still parked: the child's poke after its final commit was lost (a crash in between).
        A parent only parks while one of its children is unfinished, and a child finishing after
        that check pokes the key, so this state means a wake-up went missing."""
        sql = """
        SELECT DISTINCT w.tenant_id, w.key
        FROM run_waits w JOIN runs p ON p.id = w.run_id AND p.status = 'waiting'
        WHERE w.kind = 'agent'
          AND NOT EXISTS (
              SELECT 1 FROM runs c
              WHERE c.parent_run_id = w.run_id AND c.parent_wait_key = w.key
                AND c.status NOT IN ('completed','failed','cancelled'))
        LIMIT %s
        """
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, (limit,))
            rows = await cur.fetchall()
        return [(r["tenant_id"], r["key"]) for r in rows]

    async def parked_cancel(self, run_id: str, seen_input: int = 0) -> tuple[int | None, bool]:
        """The engine's check right after a park: (the step_no of `run_id` if it is parked with a
        cancel requested — the cancel's step message was stale and dropped mid-step —, else None;
        whether it is parked with a turn cancel not yet taken, queued after `seen_input` (the input
        the step was leased with) — while the step ran: its poke found the run running, not parked
        where it is now)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT step_no, cancel_requested, EXISTS (SELECT 1 FROM run_inputs i WHERE i.run_id = runs.id"
                " AND i.kind = 'turn_cancel' AND i.id > %s AND i.consumed_at IS NULL) AS turn_cancel"
                " FROM runs WHERE id = %s AND status = 'waiting'", (seen_input, run_id)
            )
            row = await cur.fetchone()
        if row is None:
            return None, False
        return (int(row["step_no"]) if row["cancel_requested"] else None), bool(row["turn_cancel"])

    async def parked_cancels(self, limit: int = 500, grace_s: float = 30.0) -> list[tuple[str, int]]:
        """(run_id, step_no) of parked runs whose cancel was requested but never acted on (the
        cancel's step message was stale — the run was mid-step — and the process died before
        re-sending it). Each needs a step message; a duplicate is dropped by the lease. A cancel
        requested (or re-sent) less than `grace_s` ago is left to the message it was sent with:
        the row's `updated_at` doubles as the re-send deadline, so a sweep that loops while it
        finds work (the cloud's maintenance function) sends each one once, not on every pass."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE runs SET updated_at = now() WHERE id IN ("
                " SELECT id FROM runs WHERE status = 'waiting' AND cancel_requested"
                " AND (lease_owner IS NULL OR lease_until < now())"
                " AND updated_at < now() - make_interval(secs => %s) LIMIT %s)"
                " AND status = 'waiting' RETURNING id, step_no",
                (grace_s, limit),
            )
            rows = await cur.fetchall()
        return [(r["id"], int(r["step_no"])) for r in rows]
