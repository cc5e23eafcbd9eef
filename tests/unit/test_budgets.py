"""Budgets as a pure decision (governance/budgets.py): which limits bind a run, soft and hard
breaches, loomcycle's 429 body, the window's first day."""

from __future__ import annotations

import datetime as dt

from treadle.governance.budgets import Limit, applicable, check, window_start

TENANT = Limit("acme", "tenant", "", soft_limit=800, hard_limit=1000)
USER = Limit("acme", "user", "u1", hard_limit=300)
AGENT = Limit("acme", "agent", "writer", soft_limit=50)
OTHER = Limit("other", "tenant", "", hard_limit=1)


def test_only_the_runs_own_limits_bind_it() -> None:
    limits = [TENANT, USER, AGENT, OTHER]
    assert applicable(limits, tenant_id="acme", user_id="u1", agent="writer") == [TENANT, USER, AGENT]
    assert applicable(limits, tenant_id="acme", user_id="u2", agent="reader") == [TENANT]
    assert applicable(limits, tenant_id="acme", user_id=None, agent="reader") == [TENANT]


def test_under_soft_and_hard() -> None:
    limits = [TENANT, USER, AGENT]
    assert check(limits, {TENANT: 10, USER: 10, AGENT: 10}).allowed
    soft = check(limits, {TENANT: 850, USER: 10, AGENT: 60})
    assert soft.allowed and [b.limit for b in soft.soft] == [TENANT, AGENT]
    hard = check(limits, {TENANT: 100, USER: 300})
    assert not hard.allowed and hard.hard is not None and hard.hard.limit == USER
    assert not check([TENANT], {TENANT: 900}, adding=100).allowed  # the next call's estimate counts


def test_the_refusal_is_loomcyclesbody() -> None:
    breach = check([USER], {USER: 312}).hard
    assert breach is not None
    body = breach.body()
    assert {k: body[k] for k in ("code", "scope", "scope_id", "used", "limit", "window")} == {
        "code": "token_limit_exceeded", "scope": "user", "scope_id": "u1", "used": 312, "limit": 300,
        "window": "month"}
    assert "u1" in str(body["message"])


def test_the_window_starts_on_the_first_utc_day() -> None:
    now = dt.datetime(2026, 11, 28, 23, 30, tzinfo=dt.timezone(dt.timedelta(hours=-5)))
    assert window_start("month", now) == dt.date(2026, 11, 1)
    assert window_start("day", now) == dt.date(2026, 11, 29)
