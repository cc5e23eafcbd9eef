"""`treadle usage`: token usage and cost as `GET /v1/_usage` reports it (issue 42 item 1), with the
route's filters and group-by, as a table, JSON lines or the route's own CSV:

    treadle usage [--group-by tenant,agent,day] [--from 2026-11-01] [--to 2026-11-30]
                  [--tenant T] [--user U] [--agent A] [--csv | --json]

The rows are the server's, never summed here across currencies; a table ends with a total per
currency."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from treadle.cli.console import _run, url_option
from treadle.cli.ui import console, escape

if TYPE_CHECKING:
    from treadle.client import AsyncTreadle

#: group_by dimension → the row's field (GET /v1/_usage)
COLUMNS = {"tenant": "tenant_id", "user": "user_id", "agent": "agent", "def": "def_id", "provider": "provider",
           "model": "model", "day": "day"}
TOTALS = (("INPUT", "input_tokens"), ("OUTPUT", "output_tokens"), ("CACHE W", "cache_creation_tokens"),
          ("CACHE R", "cache_read_tokens"), ("CALLS", "call_count"), ("UNPRICED", "unpriced_calls"))


def _cost(value: Any) -> str:
    return f"{float(value or 0):.6f}".rstrip("0").rstrip(".") if value else "0"


@click.command("usage", short_help="token usage and cost, grouped",
               help="token usage and cost as recorded (GET /v1/_usage): grouped by --group-by (tenant, user, agent, "
                    "def, provider, model, day), filtered by day range, tenant, user and agent")
@click.option("--group-by", "group_by", default="tenant", show_default=True,
              help="comma-separated dimensions: tenant, user, agent, def, provider, model, day")
@click.option("--from", "from_", metavar="DATE", help="first UTC day (YYYY-MM-DD or RFC 3339)")
@click.option("--to", metavar="DATE", help="last UTC day, inclusive")
@click.option("--tenant", help="the operator's focus on one tenant")
@click.option("--user", "user_id", help="only this user's usage")
@click.option("--agent", help="only this agent's usage")
@click.option("--csv", "csv_", is_flag=True, help="the route's CSV, as it answers it")
@click.option("--json", "json_", is_flag=True, help="one JSON object per row")
@url_option
def usage_command(group_by: str, from_: str | None, to: str | None, tenant: str | None, user_id: str | None,
                  agent: str | None, csv_: bool, json_: bool, url: str | None) -> int:
    from treadle.client._base import Call, clean, decode

    params = clean({"group_by": group_by, "from": from_, "to": to, "tenant": tenant, "user": user_id,
                    "agent": agent, "format": "csv" if csv_ else None})

    async def body(client: AsyncTreadle) -> int:
        resp = await client.send(Call("GET", "/v1/_usage", params=params))
        if csv_:
            if resp.status_code >= 400:
                decode(resp)  # the API's error, as one line
            sys.stdout.buffer.write(resp.content)
            sys.stdout.flush()
            return 0
        report = decode(resp)
        rows: list[dict[str, Any]] = report["rows"]
        if json_:
            for row in rows:
                print(json.dumps(row))
            return 0
        from rich.table import Table

        out = console()
        if not rows:
            out.print("no usage recorded" + (" for these filters" if from_ or to or user_id or agent else ""))
            return 0
        dims = [COLUMNS[d] for d in report["group_by"]]
        table = Table(box=None, pad_edge=False, header_style="bold")
        for d in report["group_by"]:
            table.add_column(d.upper())
        for head, _ in TOTALS:
            table.add_column(head, justify="right")
        table.add_column("COST", justify="right")
        table.add_column("CURRENCY")
        sums: dict[str, dict[str, float]] = {}
        for row in rows:
            table.add_row(*(escape(str(row.get(c) or "-")) for c in dims),
                          *(f"{int(row.get(k) or 0):,}" for _, k in TOTALS), _cost(row.get("cost")),
                          escape(row.get("currency") or "-"))
            total = sums.setdefault(row.get("currency") or "", {k: 0.0 for _, k in (*TOTALS, ("", "cost"))})
            for _, k in (*TOTALS, ("", "cost")):
                total[k] += float(row.get(k) or 0)
        for currency, total in sorted(sums.items()):
            table.add_row(*(["[bold]total[/]"] + [""] * (len(dims) - 1)),
                          *(f"[bold]{int(total[k]):,}[/]" for _, k in TOTALS), f"[bold]{_cost(total['cost'])}[/]",
                          escape(currency or "-"))
        out.print(table)
        return 0

    return _run(body, url)
