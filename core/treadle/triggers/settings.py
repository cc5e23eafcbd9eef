"""Trigger settings from the environment (`TREADLE_SCHEDULER_*`, `TREADLE_WEBHOOKS_*`)."""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field

from treadle.envsettings import EnvSettings


class TriggerSettings(EnvSettings):
    #: the sidecar's in-process schedule sweeper
    scheduler_enabled: bool = True
    scheduler_tick_seconds: float = Field(default=1.0, gt=0)
    #: a fire time this recent is on time; older due times are "missed" (see catch_up_max)
    scheduler_misfire_grace_seconds: float = Field(default=60.0, ge=0)
    #: schedules locked per sweeper transaction
    scheduler_batch: int = Field(default=500, ge=1, le=10_000)
    #: runs started concurrently by one sweeper tick
    scheduler_fire_concurrency: int = Field(default=4, ge=1, le=64)
    #: when set (comma-separated), the only environment variables a webhook may name as its secret
    webhooks_env_allowlist: str = ""

    @property
    def grace(self) -> timedelta:
        return timedelta(seconds=self.scheduler_misfire_grace_seconds)

    def env_allowlist(self) -> frozenset[str]:
        return frozenset(n.strip() for n in self.webhooks_env_allowlist.split(",") if n.strip())
