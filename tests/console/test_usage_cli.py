"""`treadle usage` (issue 42 item 1) as a user runs it: a real subprocess against a real `treadle
serve` — the route's rows as a table with a total per currency, the filters and group-by passed
through, JSON lines equal to the route's rows, the route's CSV verbatim, and a bad dimension as
one error line."""

from __future__ import annotations

import json

import httpx

from tests.console.test_console import treadle
from tests.support.e2e import ServerProcess, execute, query
from treadle.client import AsyncTreadle

SEED = """
INSERT INTO usage_daily (tenant_id, day, user_id, agent, provider, model, currency, calls, input_tokens,
                         output_tokens, cache_creation_tokens, cache_read_tokens, cost, unpriced_calls, shard)
VALUES ('{t}', '2026-10-01', 'ann', 'billing-x', 'anthropic', 'claude-x', 'USD', 2, 1000, 200, 30, 40, 0.25, 0, 0),
       ('{t}', '2026-10-01', 'bob', 'billing-x', 'anthropic', 'claude-x', 'USD', 1, 500, 100, 0, 0, 0.125, 0, 3),
       ('{t}', '2026-10-02', 'ann', 'billing-x', 'anthropic', 'claude-x', 'USD', 1, 4000, 800, 0, 0, 1.5, 0, 0),
       ('{t}', '2026-10-02', 'ann', 'billing-y', 'ollama', 'qwen', '', 3, 300, 30, 0, 0, 0, 3, 0)
"""


async def test_usage_prints_the_routes_rows_filtered_grouped_as_json_and_csv(server: ServerProcess) -> None:
    async with AsyncTreadle(server.url) as tl:
        run = await tl.runs.wait((await tl.runs.start("echo", "count me")).run_id)
        assert run.status == "completed"
    [row] = await query(server.database_url, "SELECT tenant_id FROM runs WHERE id = %s", (run.run_id,))
    tenant = row["tenant_id"]
    await execute(server.database_url, SEED.format(t=tenant))

    # the real run's usage: JSON lines are the route's rows
    done = treadle(server.url, "usage", "--group-by", "agent,provider,model", "--agent", "echo", "--json")
    assert done.returncode == 0, done.stderr
    async with httpx.AsyncClient(base_url=server.url) as http:
        route = (await http.get("/v1/_usage", params={"group_by": "agent,provider,model", "agent": "echo"})).json()
        csv = (await http.get("/v1/_usage", params={"group_by": "user,day", "agent": "billing-x",
                                                    "format": "csv"})).text
    assert [json.loads(line) for line in done.stdout.splitlines()] == route["rows"] != []

    # grouped by agent and day over a day range: the two days of billing-x, summed over users and shards
    done = treadle(server.url, "usage", "--group-by", "agent,day", "--from", "2026-10-01", "--to", "2026-10-02",
                   "--agent", "billing-x", NO_COLOR="1")
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines()]
    assert lines[0] == ["AGENT", "DAY", "INPUT", "OUTPUT", "CACHE", "W", "CACHE", "R", "CALLS", "UNPRICED", "COST",
                        "CURRENCY"]
    assert lines[1] == ["billing-x", "2026-10-01", "1,500", "300", "30", "40", "3", "0", "0.375", "USD"]
    assert lines[2] == ["billing-x", "2026-10-02", "4,000", "800", "0", "0", "1", "0", "1.5", "USD"]
    assert lines[3] == ["total", "5,500", "1,100", "30", "40", "4", "0", "1.875", "USD"]

    # a user filter; never summed across currencies: one total per currency
    done = treadle(server.url, "usage", "--group-by", "agent", "--user", "ann", "--to", "2026-10-31", NO_COLOR="1")
    rows = [line.split() for line in done.stdout.splitlines()[1:]]
    assert ["billing-x", "5,000", "1,000", "30", "40", "3", "0", "1.75", "USD"] in rows
    assert ["billing-y", "300", "30", "0", "0", "3", "3", "0", "-"] in rows
    assert sum(r[0] == "total" for r in rows) == 2

    # CSV: what the route answers, verbatim
    done = treadle(server.url, "usage", "--group-by", "user,day", "--agent", "billing-x", "--csv")
    assert done.returncode == 0, done.stderr
    assert done.stdout == csv.replace("\r\n", "\n")
    assert done.stdout.splitlines()[0].startswith("user_id,day,input_tokens")
    assert len(done.stdout.splitlines()) == 4  # ann 10-01, ann 10-02, bob 10-01

    # an unknown dimension: the route's 400, one line
    done = treadle(server.url, "usage", "--group-by", "colour")
    assert done.returncode == 1 and "unknown group_by dimension: colour" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
