"""Budgets: is a scope (tenant, user, agent) over its soft or hard limit for a window?

A pure function of the limits and the usage already recorded (store/usage.py sums usage_daily over
the window), so the same decision serves the API (refuse a run before it starts: 429
`token_limit_exceeded`, loomcycle's body) and the engine (a decider at the iteration boundary: stop
with `budget_exceeded`) and is tested without a database. Tokens are input + output + cache
creation + cache read (loomcycle's rule); a cost limit compares the priced total in the limit's
currency. A hard limit is reached at `used >= limit` (the call that crossed it was the last); a
soft one reports once crossed and refuses nothing."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

Scope = Literal["tenant", "user", "agent"]
Window = Literal["day", "month"]
Metric = Literal["tokens", "cost"]


@dataclass(frozen=True, slots=True)
class Limit:
    tenant_id: str
    scope: Scope
    scope_id: str  # "" for the tenant scope, the user id, or the agent name
    soft_limit: float | None = None
    hard_limit: float | None = None
    window: Window = "month"
    metric: Metric = "tokens"
    #: a cost limit counts the usage priced in this currency (never summed across currencies)
    currency: str = "USD"


@dataclass(frozen=True, slots=True)
class Breach:
    limit: Limit
    severity: Literal["soft", "hard"]
    used: float
    ceiling: float

    def info(self) -> dict[str, object]:
        """loomcycle's `LimitInfo` (the `limit` event's payload): scope, scope_id, severity, window,
        used, limit — plus treadle's metric."""
        out: dict[str, object] = {"scope": self.limit.scope, "scope_id": self.limit.scope_id,
                                  "severity": self.severity, "window": self.limit.window, "used": self.used,
                                  "limit": self.ceiling, "metric": self.limit.metric}
        if self.limit.metric == "cost":
            out["currency"] = self.limit.currency
        return out

    def body(self) -> dict[str, object]:
        """loomcycle's 429 body (`writeTokenLimitError`) / its `limit` event's fields."""
        what = "token" if self.limit.metric == "tokens" else "cost"
        message = (f"{self.limit.scope} {self.limit.scope_id or self.limit.tenant_id} has used "
                   f"{self.used:g} of its {self.severity} {what} limit {self.ceiling:g} this {self.limit.window}")
        return {"code": "token_limit_exceeded", "error": "token_limit_exceeded", "scope": self.limit.scope,
                "scope_id": self.limit.scope_id, "used": self.used, "limit": self.ceiling,
                "window": self.limit.window, "severity": self.severity, "message": message}


@dataclass(frozen=True, slots=True)
class Verdict:
    soft: tuple[Breach, ...] = ()
    hard: Breach | None = None

    @property
    def allowed(self) -> bool:
        return self.hard is None


def window_start(window: Window, now: dt.datetime) -> dt.date:
    """The first UTC day the window counts (calendar month or day, as loomcycle)."""
    day = now.astimezone(dt.UTC).date()
    return day.replace(day=1) if window == "month" else day


def applicable(limits: Iterable[Limit], *, tenant_id: str, user_id: str | None, agent: str) -> list[Limit]:
    """The limits that bind a run of `agent` for `user_id` in `tenant_id`."""
    out = []
    for lim in limits:
        if lim.tenant_id != tenant_id:
            continue
        if (lim.scope == "tenant" or (lim.scope == "user" and user_id is not None and lim.scope_id == user_id)
                or (lim.scope == "agent" and lim.scope_id == agent)):
            out.append(lim)
    return out


def check(limits: Iterable[Limit], used: Mapping[Limit, float], *, adding: float = 0.0) -> Verdict:
    """The verdict for limits whose window usage is `used[limit]` (missing: 0), counting `adding`
    more (an estimate of the next call; 0 at run start and at the boundary)."""
    soft: list[Breach] = []
    hard: Breach | None = None
    for lim in limits:
        total = used.get(lim, 0.0) + adding
        if lim.hard_limit is not None and total >= lim.hard_limit and hard is None:
            hard = Breach(lim, "hard", total, lim.hard_limit)
        elif lim.soft_limit is not None and total >= lim.soft_limit:
            soft.append(Breach(lim, "soft", total, lim.soft_limit))
    return Verdict(tuple(soft), hard)
