"""Riding out a database outage without dead-lettering the steps in flight.

A record the worker reports failed comes back with its receive count raised; after the queue's
maxReceiveCount (10, infra/treadle_infra/runtime.py) SQS moves it to the dead-letter queue — with
the 2…300 s backoff of `worker.py`, ~13.5 min after the first failure. A step that failed only
because the database could not be reached is not the message's fault, so the worker sends the
same body again as a new message (receive count 0) with a delay (at most SQS's 900 s
`DelaySeconds`) and acknowledges the record. The first failure's time travels in a message
attribute: once an outage outlasts `TREADLE_DB_OUTAGE_SECONDS` (12 h by default) the record fails
as any other and the dead-letter queue takes it after 10 more receives.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg

from treadle.dispatch.sqs import MAX_DELAY_S

#: message attribute: epoch seconds of the first database-unreachable failure of this step
SINCE_ATTR = "treadle-db-outage-since"
#: message attribute: how many times the step was re-sent for an unreachable database
ATTEMPTS_ATTR = "treadle-db-outage-attempts"
#: the first re-send's delay; doubled each time up to SQS's 900 s
FIRST_DELAY_S = 2
#: server codes of a connection that is gone rather than a statement that failed
_GONE = ("08", "57P01", "57P02", "57P03")


def database_unreachable(exc: BaseException) -> bool:
    """Whether `exc` (or what it wraps) says the database could not be reached: a refused or
    broken connection, a pool that found no connection in time, a server shutting down. A
    statement's own failure (a constraint, a serialization conflict, a timeout) is not."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        # psycopg reports a refused, broken or timed-out connection (and its pool a wait for
        # one in vain) as OperationalError; a bare TimeoutError or ConnectionError may come
        # from a provider or a tool, so it counts as a crash
        if isinstance(cur, psycopg.OperationalError):
            state = cur.sqlstate
            if state is None or state.startswith(_GONE):
                return True
        cur = cur.__cause__ or cur.__context__
    return False


def outage_delay_s(attempt: int) -> int:
    """The delay of the `attempt`-th re-send (1-based): 2, 4, 8 … s, at most 900 s."""
    return int(min(MAX_DELAY_S, FIRST_DELAY_S * 2 ** min(max(attempt - 1, 0), 20)))


def _attr(attrs: dict[str, Any], name: str) -> str | None:
    value = attrs.get(name) or {}
    got = value.get("stringValue") or value.get("StringValue")
    return got if isinstance(got, str) else None


def resend_for_outage(
    sqs: Any,
    queue_url: str,
    body: str,
    attributes: dict[str, Any] | None,
    *,
    ride_s: float,
    now: float | None = None,
) -> int | None:
    """Send `body` again with the outage's delay; the delay sent, or None when the outage
    (counted from the attribute the first failure set) has lasted longer than `ride_s`."""
    now = time.time() if now is None else now
    attrs = dict(attributes or {})
    since = float(_attr(attrs, SINCE_ATTR) or now)
    if now - since > ride_s:
        return None
    attempt = int(_attr(attrs, ATTEMPTS_ATTR) or 0) + 1
    delay = outage_delay_s(attempt)
    carried = {  # the sender's trace context (the Lambda event spells the keys in camelCase)
        k: {"DataType": "String", "StringValue": v} for k in ("traceparent", "tracestate") if (v := _attr(attrs, k))
    }
    carried[SINCE_ATTR] = {"DataType": "String", "StringValue": f"{since:.0f}"}
    carried[ATTEMPTS_ATTR] = {"DataType": "Number", "StringValue": str(attempt)}
    sqs.send_message(QueueUrl=queue_url, MessageBody=body, DelaySeconds=delay, MessageAttributes=carried)
    return delay
