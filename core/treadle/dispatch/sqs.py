"""The SQS dispatcher of the cloud shape: one message per loop iteration.

A message body is the step message as JSON, ``{"run_id": "r_…", "step_no": 3}``; with tracing on,
its ``traceparent``/``tracestate`` message attributes carry the context of the span that sent it. The queue is a
standard queue (at-least-once, unordered): the engine's lease fenced on ``step_no`` is what makes a
duplicate or stale delivery harmless, so no FIFO queue or deduplication id is needed.

Delays: SQS holds a message back for at most 900 s (``DelaySeconds``). A longer wait is not sent
at all — the database row that asked for it (``runs.lease_until`` set by the step's commit, or a
wait's deadline) is what brings the step back: the maintenance function sweeps due rows every
minute and enqueues them again.

The core never imports boto3: the client is injected. Anything with a boto3-style
``send_message(QueueUrl=..., MessageBody=..., DelaySeconds=...)`` method will do; a blocking client
(boto3's) is called in a worker thread so the event loop keeps running.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import math
from typing import Any, Protocol

from treadle.domain.runs import StepMessage
from treadle.telemetry import tracing

log = logging.getLogger("treadle.dispatch.sqs")

#: The longest DelaySeconds SQS accepts.
MAX_DELAY_S = 900


class SendMessageClient(Protocol):
    """The one SQS operation the dispatcher needs (boto3's client satisfies it)."""

    def send_message(self, *, QueueUrl: str, MessageBody: str, DelaySeconds: int = 0, **kw: Any) -> Any: ...


def encode_step_message(msg: StepMessage) -> str:
    return json.dumps(msg.to_json(), separators=(",", ":"))


def decode_step_message(body: str) -> StepMessage:
    """Parse a message body; a malformed one raises ValueError (it ends in the dead-letter queue)."""
    try:
        data = json.loads(body)
        run_id, step_no = data["run_id"], data["step_no"]
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"not a treadle step message: {body[:200]!r}") from exc
    if not isinstance(run_id, str) or not run_id or not isinstance(step_no, int) or isinstance(step_no, bool):
        raise ValueError(f"not a treadle step message: {body[:200]!r}")
    if step_no < 0:
        raise ValueError(f"step_no must be >= 0: {body[:200]!r}")
    return StepMessage(run_id, step_no)


def trace_attributes() -> dict[str, Any]:
    """`MessageAttributes` carrying the sending span's W3C context (`traceparent`, `tracestate`),
    as keyword arguments of send_message; none when tracing is off."""
    carrier = tracing.current_carrier()
    if not carrier:
        return {}
    return {"MessageAttributes": {k: {"DataType": "String", "StringValue": v} for k, v in carrier.items()}}


def trace_carrier(message_attributes: Any) -> dict[str, str]:
    """The W3C headers among a received message's attributes (either the boto3 shape,
    `StringValue`, or the Lambda event's, `stringValue`)."""
    out: dict[str, str] = {}
    for key in ("traceparent", "tracestate"):
        attr = (message_attributes or {}).get(key) or {}
        value = attr.get("StringValue") or attr.get("stringValue")
        if isinstance(value, str) and value:
            out[key] = value
    return out


class SqsDispatcher:
    #: The engine enqueues the next step itself, after the step's commit.
    jobs_in_db = False

    def __init__(self, client: SendMessageClient, queue_url: str) -> None:
        if not queue_url:
            raise ValueError("SqsDispatcher needs a queue URL")
        self.client = client
        self.queue_url = queue_url
        self.sent = 0
        self.deferred = 0

    async def enqueue(self, msg: StepMessage, delay_s: float = 0.0) -> None:
        if delay_s > MAX_DELAY_S:
            # Longer than SQS can hold a message: the caller's database deadline brings the step
            # back through the maintenance sweep.
            self.deferred += 1
            log.debug("step %s/%s waits %.0f s: left to the maintenance sweep", msg.run_id, msg.step_no, delay_s)
            return
        send = functools.partial(
            self.client.send_message,
            QueueUrl=self.queue_url,
            MessageBody=encode_step_message(msg),
            DelaySeconds=max(0, math.ceil(delay_s)),
            **trace_attributes(),
        )
        if inspect.iscoroutinefunction(self.client.send_message):
            await send()
        else:
            await asyncio.to_thread(send)
        self.sent += 1
