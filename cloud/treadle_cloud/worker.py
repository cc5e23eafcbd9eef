"""The worker function: an SQS batch → one engine step per record, with partial batch failures.

Per record (Powertools' `BatchProcessor`, in order):
- a step message whose `step_no` is stale, or whose run is leased by a live worker, is
  acknowledged and dropped (the engine's fence; duplicates cost one UPDATE);
- the lease is sized from the invocation's remaining time: at most `TREADLE_LEASE_SECONDS`, and
  never past the moment Lambda would kill this invocation, so a timed-out worker's run is free
  again as soon as it is dead;
- a record is not started with less than `TREADLE_MIN_STEP_SECONDS` left: it is reported failed
  and made visible again at once, for another invocation;
- the step's model calls are bounded by the invocation's deadline (remaining time minus
  `TREADLE_STEP_SAFETY_SECONDS`): a call that cannot finish is abandoned before anything of its
  turn is written, the lease is handed back and the step re-enqueued at once — never killed by
  Lambda between a commit and the next step's message (treadle_cloud/deadline.py);
- while at least `TREADLE_CHAIN_RESERVE_SECONDS` are left, the run's next step runs in the same
  invocation under the same lease (up to `TREADLE_CHAIN_STEPS`), instead of an SQS round trip;
- a step that could not reach the database (nor open the runtime at a cold start) is sent again
  with a delay and its record acknowledged, so an outage of up to `TREADLE_DB_OUTAGE_SECONDS`
  (12 h) uses none of the message's receives (treadle_cloud/outage.py);
- a step that crashed (and handed its lease back) is reported failed and comes back after an
  exponential backoff (its visibility timeout); after 5 crashed steps the engine fails the run
  itself, and a message that keeps failing (a malformed body, say) ends in the dead-letter queue.
The next step is enqueued by the engine after each commit.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from treadle.dispatch.sqs import decode_step_message, trace_carrier
from treadle.domain.runs import StepMessage
from treadle.engine.outcomes import StepResult
from treadle.engine.step import Engine  # every invocation runs it: its modules load at INIT
from treadle.runtime import Runtime
from treadle.telemetry import tracing
from treadle_cloud.container import Container, remaining_s
from treadle_cloud.deadline import InvocationClock, InvocationEnding
from treadle_cloud.env import CloudSettings, aws_client
from treadle_cloud.live import RelayHub, install_relay
from treadle_cloud.metrics import observed_invocation
from treadle_cloud.outage import database_unreachable, resend_for_outage

log = logging.getLogger("treadle.cloud.worker")

MAX_RETRY_DELAY_S = 300
#: a step whose model call met the invocation's deadline (see `_run_step`)
HANDED_BACK = "handed_back"
#: a step whose database was unreachable, sent again with a delay (treadle_cloud/outage.py)
DB_UNREACHABLE = "db_unreachable"
#: how long a step of a tenant at its fairness cap waits before it is tried again
FAIRNESS_RETRY_S = 2.0


class NotStarted(Exception):
    """Too little time left in this invocation to start the step."""


class StepHandedBack(Exception):
    """The step crashed and gave its lease back; the message is retried after a backoff."""


class SqsWorker:
    def __init__(self, container: Container | None = None) -> None:
        self.clock = InvocationClock()
        self.container = container or Container(sync_triggers=False, clock=self.clock)
        self.processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
        self.results: dict[str, int] = {}
        #: the engine's live frames to the stream functions (treadle_cloud/live.py)
        self.relay: RelayHub | None = None

    @observed_invocation  # EMF metrics, spans flushed (treadle_cloud/metrics.py)
    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        try:
            rt = self.container.runtime()
        except Exception as exc:
            if not database_unreachable(exc):
                raise
            return self._outage_batch(event, exc)  # a cold start while the database is down
        cloud = self.container.cloud or CloudSettings()
        if self.relay is None and (cloud.live_deltas or cloud.ws_endpoint):
            # the engine publishes text deltas and commit pokes to its hub; this one relays them
            # (NOTIFY to the stream functions, PostToConnection to the WebSocket watchers)
            ws = None
            if cloud.ws_endpoint:
                from treadle_cloud.wswatch import Connections, WsPusher

                ws = WsPusher(rt.pool, Connections(cloud.ws_endpoint))
            self.relay = install_relay(rt, notify=cloud.live_deltas, ws=ws)

        def record_handler(record: SQSRecord) -> str:
            return self.step(rt, cloud, record, context)

        return dict(process_partial_response(event, record_handler, self.processor, context))

    def step(self, rt: Runtime, cloud: CloudSettings, record: SQSRecord, context: Any) -> str:
        budget = remaining_s(context) - cloud.step_safety_seconds
        if budget < cloud.min_step_seconds:
            self._release(cloud, record, 0)
            raise NotStarted(f"{budget:.1f} s left; the record goes back to the queue")
        try:
            msg = decode_step_message(record.body)
            # One invocation at a time per execution environment, records in order: the store's
            # lease length can be set for the step about to run.
            rt.steps.lease_s = min(rt.settings.lease_seconds, budget)
            rt.engine.settings.chain_budget_s = max(0.0, budget - cloud.chain_reserve_seconds)
            self.clock.deadline = time.monotonic() + budget
            try:
                with tracing.attached(trace_carrier(record.message_attributes)):  # the sender's span
                    result = self.container.run(self._run_step(rt, msg))
            finally:
                self.clock.deadline = None
            outcome = result.value if result is not None else HANDED_BACK
            self.results[outcome] = self.results.get(outcome, 0) + 1
            if result is StepResult.RETRY_LATER:
                raise StepHandedBack(f"step {msg.run_id}/{msg.step_no} crashed; retried after a backoff")
        except Exception as exc:
            if database_unreachable(exc) and self._resend(cloud, record.body, record.message_attributes, exc):
                self.results[DB_UNREACHABLE] = self.results.get(DB_UNREACHABLE, 0) + 1
                return DB_UNREACHABLE
            # a crashed step, a malformed body, an outage longer than the ride: back to the queue
            # after 2, 4, 8 … s rather than the queue's whole visibility timeout (the dead-letter
            # queue takes it after its maxReceiveCount)
            attempts = int(record.attributes.approximate_receive_count or 1)
            self._release(cloud, record, min(MAX_RETRY_DELAY_S, 2**attempts))
            raise
        return outcome

    async def _run_step(self, rt: Runtime, msg: StepMessage) -> StepResult | None:
        """`Engine.handle`, with the lease in hand: a step whose model call meets the deadline is
        handed back — its lease released, its (possibly chained) step enqueued again — and the
        record acknowledged (None)."""
        engine: Engine = rt.engine
        owner = engine.new_owner()
        over_cap, leased = await rt.steps.lease_within_cap(msg.run_id, msg.step_no, owner)
        if over_cap:
            # fairness: its tenant (user) is at its cap — sent again with a delay and this record
            # acknowledged (a released record would count toward the dead-letter queue)
            await rt.dispatcher.enqueue(msg, delay_s=FAIRNESS_RETRY_S)
            return StepResult.DEFERRED
        if leased is None:
            return StepResult.DROPPED
        lease = engine.lease_of(leased, owner)
        try:
            return await engine.run_lease(lease)
        except InvocationEnding as exc:
            current = lease.owner  # a chained step runs under the token its commit handed over
            log.warning("step %s/%s handed back: %s", leased.run_id, leased.step_no, exc)
            if await rt.steps.release_after_failure(leased, current, 0.0):
                await rt.dispatcher.enqueue(StepMessage(leased.run_id, leased.step_no))
            return None
        finally:
            if self.relay is not None:
                await self.relay.flush()  # before the invocation returns and the environment freezes

    def _resend(self, cloud: CloudSettings, body: str, attributes: Any, exc: BaseException) -> bool:
        """Send a step whose database was unreachable again with a delay; False (the record then
        fails as any other) when the outage outlasted the ride or SQS refused the message."""
        if not cloud.queue_url:
            return False
        try:
            delay = resend_for_outage(aws_client("sqs"), cloud.queue_url, body, dict(attributes or {}),
                                      ride_s=cloud.db_outage_seconds)
        except Exception as send_exc:
            log.warning("could not send a step again during a database outage: %s", send_exc)
            return False
        if delay is None:
            log.error("the database has been unreachable longer than %.0f s: the step counts toward "
                      "the dead-letter queue: %s", cloud.db_outage_seconds, exc)
            return False
        log.warning("database unreachable; step sent again in %d s: %s", delay, exc)
        return True

    def _outage_batch(self, event: dict[str, Any], exc: BaseException) -> dict[str, Any]:
        """The runtime could not open because the database is unreachable: every record is sent
        again with a delay and acknowledged; one that could not be is reported failed."""
        cloud = CloudSettings()
        failures = []
        for raw in event.get("Records", []):
            if self._resend(cloud, raw.get("body", ""), raw.get("messageAttributes"), exc):
                self.results[DB_UNREACHABLE] = self.results.get(DB_UNREACHABLE, 0) + 1
            else:
                failures.append({"itemIdentifier": raw.get("messageId", "")})
        return {"batchItemFailures": failures}

    def _release(self, cloud: CloudSettings, record: SQSRecord, delay_s: int) -> None:
        """Best effort: make a failed record visible again after `delay_s` instead of the
        queue's whole visibility timeout."""
        if not cloud.queue_url:
            return
        try:
            aws_client("sqs").change_message_visibility(
                QueueUrl=cloud.queue_url, ReceiptHandle=record.receipt_handle, VisibilityTimeout=int(delay_s)
            )
        except Exception as exc:
            log.warning("could not change the visibility of %s: %s", record.message_id, exc)
