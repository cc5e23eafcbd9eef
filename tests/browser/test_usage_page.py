"""The usage tab (issue 42 item 1) in a real headless Chromium against a real `treadle serve`: a
stacked bar per UTC day of the chosen range (the days outside it left out), each bar's figures
equal to GET /v1/_usage grouped by day, the totals grouped by agent, user or model, a filter, and
no console errors (a CSP violation is one). Skipped where no Chromium is installed."""

from __future__ import annotations

import datetime as dt

import httpx
import pytest

from tests.browser.conftest import TOKEN
from tests.support.browser import Browser, ok
from tests.support.e2e import ServerProcess, execute

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


def seed(tenant: str) -> tuple[list[str], str]:
    """Usage rows on the last three UTC days and one 40 days ago (outside the page's default 30)."""
    today = dt.datetime.now(dt.UTC).date()
    days = [(today - dt.timedelta(days=n)).isoformat() for n in (2, 1, 0)]
    old = (today - dt.timedelta(days=40)).isoformat()
    rows = [
        (days[0], "ann", "writer", "anthropic", "claude-x", "USD", 2, 1000, 200, 10, 20, 0.5, 0),
        (days[0], "bob", "writer", "anthropic", "claude-x", "USD", 1, 500, 100, 0, 0, 0.25, 0),
        (days[1], "ann", "reader", "openai", "gpt-x", "EUR", 1, 3000, 300, 0, 0, 1.0, 0),
        (days[2], "bob", "reader", "ollama", "qwen", "", 4, 200, 20, 0, 0, 0, 4),
        (old, "ann", "writer", "anthropic", "claude-x", "USD", 9, 99999, 9999, 0, 0, 9.0, 0),
    ]
    values = ", ".join(f"('{tenant}', '{d}', '{u}', '{a}', '{p}', '{m}', '{c}', {n}, {i}, {o}, {cw}, {cr}, {cost},"
                       f" {up})" for d, u, a, p, m, c, n, i, o, cw, cr, cost, up in rows)
    return days, ("INSERT INTO usage_daily (tenant_id, day, user_id, agent, provider, model, currency, calls,"
                  " input_tokens, output_tokens, cache_creation_tokens, cache_read_tokens, cost, unpriced_calls)"
                  f" VALUES {values}")


def test_the_usage_tab_draws_a_bar_per_day_and_the_grouped_totals(
    page: Browser, served: ServerProcess, api: httpx.Client
) -> None:
    tenant = ok(api.get("/v1/_whoami"))["tenant_id"]
    days, sql = seed(tenant)
    import asyncio

    asyncio.run(execute(served.database_url, sql))
    page.open(served.url, "usage", token=TOKEN)
    page.wait("a bar per day", lambda: len(page.all("#usage-chart g.day")) == 3)
    assert page.attrs("#usage-chart g.day", "data-day") == days  # the old day is outside the last 30
    by_day = {r["day"]: r for r in ok(api.get("/v1/_usage", params={"group_by": "day", "from": days[0]}))["rows"]}
    expected = {d: sum(r[k] for r in ok(api.get("/v1/_usage", params={"group_by": "day", "from": d, "to": d}))["rows"]
                       for k in ("input_tokens", "output_tokens", "cache_creation_tokens", "cache_read_tokens"))
                for d in days}
    assert [int(t) for t in page.attrs("#usage-chart g.day", "data-tokens")] == [expected[d] for d in days]
    assert expected[days[0]] == 1000 + 200 + 10 + 20 + 500 + 100 and days[1] in by_day
    assert page.attrs("#usage-chart g.day", "data-cost") == ["0.75 USD", "1 EUR", "0"]
    assert len(page.all("#usage-chart g.day rect")) == 3 + 2 + 2  # input, output, cache; no cache later
    assert "0.75 USD + 1 EUR" in page.text("#usage-legend")

    # totals by agent (the default), then by user; costs never summed across currencies
    rows = {tr.get_attribute("data-key"): tr.text.split() for tr in page.all("#usage-table tbody tr")}
    assert set(rows) == {"reader", "writer"}
    assert rows["writer"] == ["writer", "1,500", "300", "10", "20", "3", "0", "0.75", "USD"]
    page.pick("#usage-group", "user")
    page.wait("the totals by user", lambda: {"ann", "bob"} == set(page.attrs("#usage-table tbody tr", "data-key")))
    assert len(page.all('#usage-table tbody tr[data-key="ann"]')) == 2  # USD and EUR: two rows

    # an agent filter narrows the chart and the table
    page.fill("#usage-agent", "reader")
    page.click("#usage-form button")
    page.wait("reader's days only", lambda: page.attrs("#usage-chart g.day", "data-day") == days[1:])
