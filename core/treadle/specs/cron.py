"""Cron expressions in an IANA timezone: validation, fire times, catch-up after downtime, and the
translation to EventBridge Scheduler's 6-field syntax.

Accepted: the 5 standard fields (minute hour day-of-month month day-of-week) with numbers, `*`,
ranges, steps, lists and English month/day names, or one of @yearly @annually @monthly @weekly
@daily @midnight @hourly. Quartz extensions (`L`, `W`, `#`, `?`) are refused, and so is an
expression that restricts both day-of-month and day-of-week (standard cron ORs them; EventBridge
cannot express that, so such a schedule would behave differently in the two shapes).

Fire times are computed by croniter in the schedule's timezone (DST-aware) and handled in UTC.

Missed fires: a fire time is *on time* while `now - t <= grace`; older due times are *missed*.
After downtime the newest `catch_up_max` missed times fire and the older ones are skipped — the
same rule decides in the sidecar's sweeper (`plan`) and for one late EventBridge invocation
(`fire_late_ok`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_NUMERIC = re.compile(r"^[0-9*,/\-]+$")
_NAMED = re.compile(r"^[A-Za-z0-9*,/\-]+$")
_TOKEN = re.compile(r"[,/\-]")
#: how many skipped fire times `plan` counts before it stops counting (bounded work after long downtime)
SKIP_COUNT_CAP = 1_000
#: EventBridge Scheduler's field ranges (minute, hour, day-of-month, month, day-of-week 1=SUN..7=SAT)
_EB_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (1, 7))


class CronError(ValueError):
    """An invalid or non-portable schedule expression / timezone."""


@cache
def _croniter() -> Any:
    """croniter, imported where a schedule is computed: the worker and API functions of the cloud
    shape load schedule specs with the config but only the sweeper/scheduler compute fire times."""
    from croniter import croniter

    return croniter


def normalize_cron(expr: str) -> str:
    """The expression with single spaces and macros expanded; CronError if it is not accepted."""
    if not isinstance(expr, str) or not expr.strip():
        raise CronError("schedule is required: a 5-field cron expression such as '0 3 * * *'")
    text = " ".join(expr.split())
    if text.startswith("@"):
        if text.lower() not in MACROS:
            raise CronError(f"unknown schedule macro {text!r} (known: {', '.join(MACROS)})")
        return MACROS[text.lower()]
    fields = text.split(" ")
    if len(fields) != 5:
        raise CronError(
            f"schedule {text!r} has {len(fields)} fields; expected 5 (minute hour day-of-month month day-of-week)"
        )
    for i, f in enumerate(fields):
        pattern = _NAMED if i >= 3 else _NUMERIC
        if not pattern.match(f):
            raise CronError(f"schedule {text!r}: the {FIELD_NAMES[i]} field {f!r} has characters cron does not allow")
        names = _MONTHS if i == 3 else _DAYS
        for token in _TOKEN.split(f):
            if token and not token.isdigit() and token != "*" and token.lower() not in names:
                raise CronError(f"schedule {text!r}: {token!r} is not valid in the {FIELD_NAMES[i]} field")
    if not _croniter().is_valid(text):
        raise CronError(f"schedule {text!r} is not a valid cron expression (a value is out of range?)")
    expanded = _expand(text)
    if expanded[2] != ["*"] and expanded[4] != ["*"]:
        raise CronError(
            f"schedule {text!r} restricts both day-of-month and day-of-week; cron would OR them, which "
            "EventBridge Scheduler cannot express — use two schedules"
        )
    return text


def zone(name: str) -> ZoneInfo:
    if not isinstance(name, str) or not name:
        raise CronError("timezone must be an IANA name such as 'UTC' or 'Europe/Berlin'")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise CronError(f"unknown timezone {name!r} (an IANA name such as 'UTC' or 'America/New_York')") from None


def _expand(text: str) -> list[list[int | str]]:
    expanded, _ = _croniter().expand(text)
    return [list(f) for f in expanded]


def utc(t: datetime) -> datetime:
    if t.tzinfo is None:
        raise ValueError("naive datetime")
    return t.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class Cron:
    expr: str
    tz: str = "UTC"

    def __post_init__(self) -> None:
        object.__setattr__(self, "expr", normalize_cron(self.expr))
        zone(self.tz)

    @property
    def zone(self) -> ZoneInfo:
        return zone(self.tz)

    def next_after(self, t: datetime) -> datetime:
        """The first fire time strictly after `t` (UTC)."""
        it = _croniter()(self.expr, utc(t).astimezone(self.zone))
        return utc(it.get_next(datetime))

    def prev_at_or_before(self, t: datetime) -> datetime:
        """The last fire time at or before `t` (UTC). (Fire times are whole seconds: searching back
        from the next whole second after `t`'s own second finds `t` itself when it is one, and never
        a time after `t` — from `t + 1 s` a fire up to a second later would be found.)"""
        whole = utc(t).replace(microsecond=0)
        it = _croniter()(self.expr, whole.astimezone(self.zone) + timedelta(seconds=1))
        return utc(it.get_prev(datetime))

    def prev_before(self, t: datetime) -> datetime:
        it = _croniter()(self.expr, utc(t).astimezone(self.zone))
        return utc(it.get_prev(datetime))

    def matches(self, t: datetime) -> bool:
        local = utc(t).astimezone(self.zone)
        return local.second == 0 and local.microsecond == 0 and bool(_croniter().match(self.expr, local))

    def to_eventbridge(self) -> str:
        return to_eventbridge(self.expr)


@dataclass(slots=True)
class FirePlan:
    #: fire times to fire now, oldest first (UTC)
    fire: list[datetime] = field(default_factory=list)
    #: due times skipped as missed beyond `catch_up_max` (counted up to SKIP_COUNT_CAP)
    skipped: int = 0
    #: the first fire time after `now`
    next_at: datetime | None = None


def plan(cron: Cron, since: datetime, now: datetime, *, grace: timedelta, catch_up_max: int) -> FirePlan:
    """What is due in [since, now]: every on-time fire, the newest `catch_up_max` missed ones."""
    out = FirePlan(next_at=cron.next_after(now))
    since, now = utc(since), utc(now)
    t = cron.prev_at_or_before(now)
    newest_first: list[datetime] = []
    missed_taken = 0
    while t >= since:
        if now - t <= grace:
            newest_first.append(t)
        elif missed_taken < catch_up_max:
            newest_first.append(t)
            missed_taken += 1
        else:
            out.skipped += 1
            if out.skipped >= SKIP_COUNT_CAP:
                break
        t = cron.prev_before(t)
    out.fire = sorted(newest_first)
    return out


def fire_late_ok(cron: Cron, t: datetime, now: datetime, *, grace: timedelta, catch_up_max: int) -> bool:
    """Should fire time `t`, arriving at `now`, still fire? (one EventBridge invocation)"""
    t, now = utc(t), utc(now)
    if now - t <= grace:
        return True
    newer_missed = 0
    nxt = cron.next_after(t)
    while now - nxt > grace and newer_missed < catch_up_max:
        newer_missed += 1
        nxt = cron.next_after(nxt)
    return newer_missed < catch_up_max


# -- EventBridge Scheduler ------------------------------------------------------------------------


def _compress(values: list[int], lo: int, hi: int) -> str:
    vals = sorted(set(values))
    if vals == list(range(lo, hi + 1)):
        return "*"
    parts: list[str] = []
    start = prev = vals[0]
    for v in [*vals[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ",".join(parts)


def to_eventbridge(expr: str) -> str:
    """`cron(minutes hours day-of-month month day-of-week year)` for EventBridge Scheduler, with
    every field expanded to explicit values/ranges (day-of-week renumbered 0-6 → 1-7, SUN = 1),
    and `?` in whichever day field is unrestricted."""
    text = normalize_cron(expr)
    expanded = _expand(text)
    out: list[str] = []
    for i, values in enumerate(expanded):
        lo, hi = _EB_RANGES[i]
        if values == ["*"]:
            out.append("*")
            continue
        ints = [int(v) for v in values]
        if i == 4:
            ints = [(v % 7) + 1 for v in ints]
        out.append(_compress(ints, lo, hi))
    minute, hour, dom, month, dow = out
    if dow == "*":
        dow = "?"
    else:
        dom = "?"
    return f"cron({minute} {hour} {dom} {month} {dow} *)"
