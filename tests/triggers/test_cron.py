"""Cron parsing, fire-time planning after downtime, and the EventBridge translation (checked
against an independent evaluator of EventBridge's cron fields)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from treadle.specs.cron import Cron, CronError, fire_late_ok, normalize_cron, plan, to_eventbridge

GRACE = timedelta(seconds=60)


@pytest.mark.parametrize(
    ("expr", "normalized"),
    [
        ("0 3 * * *", "0 3 * * *"),
        ("  */15   9-17 * * mon-fri ", "*/15 9-17 * * mon-fri"),
        ("@daily", "0 0 * * *"),
        ("@HOURLY", "0 * * * *"),
        ("0 0 1 jan,jul *", "0 0 1 jan,jul *"),
    ],
)
def test_accepted(expr: str, normalized: str) -> None:
    assert normalize_cron(expr) == normalized


@pytest.mark.parametrize(
    ("expr", "needle"),
    [
        ("", "required"),
        ("0 3 * *", "4 fields"),
        ("0 0 3 * * *", "6 fields"),
        ("60 * * * *", "not a valid cron"),
        ("0 0 L * *", "characters"),
        ("0 0 ? * *", "characters"),
        ("0 0 * * 5#2", "characters"),
        ("0 0 * * 5L", "not valid in the day-of-week"),
        ("0 0 * foo *", "not valid in the month"),
        ("0 0 1 * mon", "both day-of-month and day-of-week"),
        ("@fortnightly", "unknown schedule macro"),
    ],
)
def test_refused(expr: str, needle: str) -> None:
    with pytest.raises(CronError, match=needle):
        normalize_cron(expr)


def test_timezone_and_dst() -> None:
    with pytest.raises(CronError, match="unknown timezone"):
        Cron("0 3 * * *", "Europe/Atlantis")
    ny = Cron("0 3 * * *", "America/New_York")
    t = ny.next_after(datetime(2026, 1, 1, tzinfo=UTC))
    assert t == datetime(2026, 1, 1, 8, tzinfo=UTC)  # 03:00 EST
    t = ny.next_after(datetime(2026, 7, 1, tzinfo=UTC))
    assert t == datetime(2026, 7, 1, 7, tzinfo=UTC)  # 03:00 EDT
    berlin = Cron("0 3 * * *", "Europe/Berlin")
    fires = [berlin.next_after(datetime(2026, 3, 27, 12, tzinfo=UTC))]
    for _ in range(3):
        fires.append(berlin.next_after(fires[-1]))
    local = [f.astimezone(ZoneInfo("Europe/Berlin")) for f in fires]
    assert [(x.day, x.hour) for x in local] == [(28, 3), (29, 3), (30, 3), (31, 3)]  # across the DST switch
    assert berlin.matches(fires[0]) and not berlin.matches(fires[0] + timedelta(minutes=1))


def test_plan_on_time_and_after_downtime() -> None:
    cron = Cron("*/10 * * * *")
    since = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    now = since + timedelta(seconds=20)
    p = plan(cron, since, now, grace=GRACE, catch_up_max=0)
    assert (p.fire, p.skipped, p.next_at) == ([since], 0, since + timedelta(minutes=10))
    now = since + timedelta(hours=1, seconds=5)  # 7 due times: 12:00 … 13:00; 13:00 is on time
    for catch_up, fired, skipped in [(0, 1, 6), (1, 2, 5), (3, 4, 3), (10, 7, 0)]:
        p = plan(cron, since, now, grace=GRACE, catch_up_max=catch_up)
        assert (len(p.fire), p.skipped) == (fired, skipped)
        assert p.fire[-1] == since + timedelta(hours=1) and p.fire == sorted(p.fire)
        assert p.fire[0] == since + timedelta(hours=1) - timedelta(minutes=10 * (fired - 1))


def test_one_late_invocation_decides_like_the_sweeper() -> None:
    rng = random.Random(7)
    cron = Cron("*/5 * * * *")
    base = datetime(2026, 5, 1, tzinfo=UTC)
    for _ in range(30):
        now = base + timedelta(minutes=rng.randint(0, 240), seconds=rng.randint(0, 59))
        catch_up = rng.randint(0, 6)
        p = plan(cron, base, now, grace=GRACE, catch_up_max=catch_up)
        t = base
        while t <= now:
            assert fire_late_ok(cron, t, now, grace=GRACE, catch_up_max=catch_up) == (t in p.fire), (t, now, catch_up)
            t = cron.next_after(t)


@pytest.mark.parametrize(
    ("expr", "eventbridge"),
    [
        ("0 3 * * *", "cron(0 3 * * ? *)"),
        ("*/15 9-17 * * mon-fri", "cron(0,15,30,45 9-17 ? * 2-6 *)"),
        ("0 0 * * 0", "cron(0 0 ? * 1 *)"),
        ("0 0 * * 7", "cron(0 0 ? * 1 *)"),
        ("0 0 * * 5-7", "cron(0 0 ? * 1,6-7 *)"),
        ("30 2 1,15 */2 *", "cron(30 2 1,15 1,3,5,7,9,11 ? *)"),
        ("0 12 * jan-mar sat,sun", "cron(0 12 ? 1-3 1,7 *)"),
        ("* * * * *", "cron(* * * * ? *)"),
    ],
)
def test_eventbridge_translation(expr: str, eventbridge: str) -> None:
    assert to_eventbridge(expr) == eventbridge


def _eb_field(spec: str, lo: int, hi: int) -> set[int]:
    if spec in ("*", "?"):
        return set(range(lo, hi + 1))
    out: set[int] = set()
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def _eb_matches(expression: str, t: datetime) -> bool:
    """EventBridge's documented cron semantics for the subset treadle emits."""
    minute, hour, dom, month, dow, year = expression.removeprefix("cron(").removesuffix(")").split()
    assert year == "*" and "?" in (dom, dow)
    eb_dow = (t.isoweekday() % 7) + 1  # SUN=1 … SAT=7
    return (
        t.minute in _eb_field(minute, 0, 59) and t.hour in _eb_field(hour, 0, 23)
        and t.day in _eb_field(dom, 1, 31) and t.month in _eb_field(month, 1, 12)
        and eb_dow in _eb_field(dow, 1, 7)
    )


@pytest.mark.parametrize(
    "expr",
    ["*/37 * * * *", "5 */3 * * 1-5", "0 9 * * 0,6", "15 10 29-31 * *", "0 0 * 2 *", "*/20 1-2 * * 5-7"],
)
def test_translation_fires_at_the_same_minutes(expr: str) -> None:
    cron = Cron(expr)
    eb = to_eventbridge(expr)
    start = datetime(2028, 1, 27, tzinfo=UTC)  # month ends, a leap February, weekends
    days = 36
    expected: list[datetime] = []
    t = cron.next_after(start - timedelta(minutes=1))
    while t < start + timedelta(days=days):
        expected.append(t)
        t = cron.next_after(t)
    minutes = (start + timedelta(minutes=m) for m in range(days * 24 * 60))
    got = [t for t in minutes if _eb_matches(eb, t)]
    assert got == expected


def test_the_last_fire_at_or_before_is_never_after_the_moment() -> None:
    """Regression: in the last second before a fire time, the search found that (future) fire."""
    from datetime import UTC, datetime

    every_minute = Cron("* * * * *")
    assert every_minute.prev_at_or_before(datetime(2026, 1, 1, 12, 2, 59, 500_000, tzinfo=UTC)) == datetime(
        2026, 1, 1, 12, 2, tzinfo=UTC)
    assert every_minute.prev_at_or_before(datetime(2026, 1, 1, 12, 3, tzinfo=UTC)) == datetime(
        2026, 1, 1, 12, 3, tzinfo=UTC)
