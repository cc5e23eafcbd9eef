"""The migrate function: treadle's migrations at deploy time, and the operator's doctor.

Two callers:

- the stack's custom resource (CDK's Provider framework invokes it synchronously with a
  CloudFormation event). Create/Update applies every pending migration and then checks the
  database; any FAIL raises, the Provider framework reports FAILED and the deploy rolls back —
  before a function's new version is served (the functions' aliases depend on the resource).
  Delete touches nothing (the database outlives the resource on purpose).
- an operator (`python -m treadle_cloud.doctor --stack NAME`, or `aws lambda invoke` with
  `{"action": "doctor"}`): the same PASS/WARN/FAIL lines `treadle doctor` prints, from inside
  the VPC, where the database is; `{"action": "migrate"}` migrates by hand.

It opens no Runtime (that would migrate on its own, and hide the error): one connection.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, field
from typing import Any

from treadle.config import load_config, load_settings
from treadle.errors import TreadleError
from treadle_cloud.env import CloudSettings, export_secrets

log = logging.getLogger("treadle.cloud.migrate")

PHYSICAL_ID = "treadle-migrations"
CONNECT_TIMEOUT_S = 10


class MigrationFailed(Exception):
    """A deploy-time migration or check failed: the custom resource fails, so does the deploy."""


@dataclass
class Report:
    lines: list[tuple[str, str]] = field(default_factory=list)
    applied: list[int] = field(default_factory=list)

    def add(self, level: str, what: str) -> None:
        self.lines.append((level, what))

    @property
    def failed(self) -> bool:
        return any(level == "FAIL" for level, _ in self.lines)

    def text(self) -> list[str]:
        return [f"{level:<4} {what}" for level, what in self.lines]


async def check_database(url: str, report: Report, *, migrate_first: bool, require_pgvector: bool) -> None:
    """Migrate (when asked), then the database checks `treadle doctor` makes."""
    import psycopg

    from treadle.store.db import redact_url
    from treadle.store.migrate import applied_versions, available_migrations, migrate

    where = redact_url(url)
    if migrate_first:
        try:
            report.applied = await migrate(url)
        except (TreadleError, psycopg.Error) as exc:
            report.add("FAIL", f"migrations failed on {where}: {exc}".strip())
            return
        report.add("PASS", f"migrations: {len(report.applied)} applied now {report.applied or ''}".rstrip())
    try:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error as exc:
        report.add("FAIL", f"database unreachable: {where}: {exc}".strip())
        return
    async with conn:
        cur = await conn.execute("SHOW server_version")
        row = await cur.fetchone()
        report.add("PASS", f"database reachable: {where} (PostgreSQL {row[0] if row else '?'})")
        missing = sorted({m.version for m in available_migrations()} - await applied_versions(conn))
        if missing:
            report.add("FAIL" if migrate_first else "WARN", f"migrations pending: {missing}")
        else:
            report.add("PASS", f"migrations applied ({len(available_migrations())})")
        cur = await conn.execute(
            "SELECT (SELECT extversion FROM pg_extension WHERE extname = 'vector'),"
            " (SELECT default_version FROM pg_available_extensions WHERE name = 'vector')"
        )
        installed, available = (await cur.fetchone()) or (None, None)
        if installed:
            report.add("PASS", f"pgvector {installed} installed")
        else:
            what = (f"pgvector {available} is available but not installed (the role may not create it)"
                    if available else "pgvector is not available on this server")
            report.add("FAIL" if require_pgvector else "WARN", f"{what}: vector Memory is unavailable")


def run_checks(*, migrate_first: bool, require_pgvector: bool) -> Report:
    """Everything the function checks, as a report (never raises for what it checks)."""
    report = Report()
    try:
        cloud = CloudSettings()
        exported = export_secrets(cloud)
        settings = load_settings()
        report.add("PASS", f"environment ({', '.join(exported) or 'nothing'} from Secrets Manager)")
    except Exception as exc:  # a missing secret, a bad variable: say so, as a FAIL line
        report.add("FAIL", f"environment: {exc}")
        return report
    try:
        config = load_config(settings.config)
        report.add("PASS", f"config {settings.config}: {len(config.agents)} agent(s)")
    except TreadleError as exc:
        report.add("FAIL", f"config {settings.config}: {exc}")
    if not settings.database_url:
        report.add("FAIL", "no DATABASE_URL and no TREADLE_DB_SECRET_ARN")
        return report
    asyncio.run(check_database(settings.database_url, report, migrate_first=migrate_first,
                               require_pgvector=require_pgvector))
    return report


class MigrateFunction:
    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        event = event if isinstance(event, dict) else {}
        request = event.get("RequestType")
        if request is not None:
            return self.custom_resource(request, event)
        action = event.get("action", "doctor")
        if action not in ("doctor", "migrate"):
            raise ValueError(f"unknown action {action!r}: expected 'doctor' or 'migrate'")
        report = run_checks(migrate_first=action == "migrate", require_pgvector=_require_pgvector(event))
        for line in report.text():
            log.info("%s", line)
        return {"ok": not report.failed, "lines": report.text(), "applied": report.applied}

    def custom_resource(self, request: str, event: dict[str, Any]) -> dict[str, Any]:
        physical_id = str(event.get("PhysicalResourceId") or PHYSICAL_ID)
        if request == "Delete":  # the database keeps its schema; nothing to undo
            return {"PhysicalResourceId": physical_id}
        if request not in ("Create", "Update"):
            raise ValueError(f"unknown RequestType {request!r}")
        props = event.get("ResourceProperties") or {}
        report = run_checks(migrate_first=True, require_pgvector=_require_pgvector(props))
        for line in report.text():
            log.info("%s", line)
        if report.failed:
            # the Provider framework puts this message into the stack event the operator sees
            raise MigrationFailed("; ".join(line for line in report.text() if line.startswith("FAIL")))
        return {"PhysicalResourceId": PHYSICAL_ID,
                "Data": {"Applied": ",".join(map(str, report.applied)) or "none"}}


def _require_pgvector(props: dict[str, Any]) -> bool:
    value = props.get("RequirePgvector", props.get("require_pgvector",
                      os.environ.get("TREADLE_REQUIRE_PGVECTOR", "true")))
    return str(value).lower() not in ("false", "0", "no")
