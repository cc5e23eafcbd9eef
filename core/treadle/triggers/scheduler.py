"""The Scheduler port: what keeps an external timer (EventBridge Scheduler) in step with the
schedules. The sidecar needs none — its sweeper reads the `schedules` table itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ScheduleTarget:
    """One schedule as an external scheduler should hold it."""

    schedule_id: str
    tenant_id: str
    name: str
    version: int
    cron: str
    timezone: str
    enabled: bool

    @property
    def synced_state(self) -> str:
        return f"v{self.version}:{'enabled' if self.enabled else 'disabled'}"


class Scheduler(Protocol):
    name: str

    def validate(self, cron: str, timezone: str) -> None:
        """Raise ValueError if this scheduler cannot express the schedule."""
        ...

    async def upsert(self, schedule: ScheduleTarget) -> None: ...

    async def delete(self, schedule_id: str) -> None: ...
