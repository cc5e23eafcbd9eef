"""Interruptions (questions a run asks a person): list, inbox, resolve."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from treadle.wire._base import Request, Response


class ResolveRequest(Request):
    """Body of POST /v1/runs/{run_id}/interrupts/{interrupt_id}/resolve; `answer` is required
    (non-blank) unless `disposition` is `declined`."""

    answer: str | None = Field(default=None, max_length=64_000)
    disposition: Literal["answer", "declined"] = "answer"
    resolved_by: Literal["webui", "mcp", "cli", "api", "client"] = "api"  # "client": loomcycle's clients
    kind: str | None = Field(default=None, max_length=64)


class Interrupt(Response):
    interrupt_id: str
    run_id: str
    kind: str
    question: str
    #: the choices offered (`kind: choice`), else empty
    options: list[Any] | None = None
    context: str | None = None
    priority: str | None = None
    status: str
    answer: str | None = None
    resolved_by: str | None = None
    expires_at: str | None = None
    created_at: str | None = None
    resolved_at: str | None = None
    #: in an inbox: the agent of the run that asks
    agent: str | None = None
    #: in the tenant's inbox: the run's user and, for a sub-agent, its parent run
    user_id: str | None = None
    parent_run_id: str | None = None


class RunInterrupts(Response):
    run_id: str
    interrupts: list[Interrupt]


class UserInterrupts(Response):
    user_id: str
    interrupts: list[Interrupt]


class TenantInterrupts(Response):
    interrupts: list[Interrupt]


class InterruptResolved(Response):
    interrupt_id: str
    status: str
    resolved_at: str | None = None
