"""The worker function: an SQS batch → one engine step per record, with partial batch failures.

Per record (Powertools' `BatchProcessor`, in order):
- a step message whose `step_no` is stale, or whose run is leased by a live worker, is
  acknowledged and dropped (the engine's fence; duplicates cost one UPDATE);
- the lease is sized from the invocation's remaining time: at most `TREADLE_LEASE_SECONDS`, and
  never past the moment Lambda would kill this invocation, so a timed-out worker's run is free
  again as soon as it is dead;
- a record is not started with less than `TREADLE_MIN_STEP_SECONDS` left: it is reported failed
  and made visible again at once, for another invocation;
- a step that crashed (and handed its lease back), or could not reach the database, is reported
  failed and comes back after an exponential backoff (its visibility timeout); after 5 crashed
  steps the engine fails the run itself, and a message that keeps failing (a malformed body, say)
  ends in the dead-letter queue.
The next step is enqueued by the engine after each commit.
"""

from __future__ import annotations

import logging
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from treadle.dispatch.sqs import decode_step_message, trace_carrier
from treadle.engine.outcomes import StepResult
from treadle.runtime import Runtime
from treadle.telemetry import tracing
from treadle_cloud.container import Container, remaining_s
from treadle_cloud.env import CloudSettings, aws_client
from treadle_cloud.metrics import observed_invocation

log = logging.getLogger("treadle.cloud.worker")

MAX_RETRY_DELAY_S = 300


class NotStarted(Exception):
    """Too little time left in this invocation to start the step."""


class StepHandedBack(Exception):
    """The step crashed and gave its lease back; the message is retried after a backoff."""


class SqsWorker:
    def __init__(self, container: Container | None = None) -> None:
        self.container = container or Container(sync_triggers=False)
        self.processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
        self.results: dict[str, int] = {}

    @observed_invocation  # EMF metrics, spans flushed (treadle_cloud/metrics.py)
    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        rt = self.container.runtime()
        cloud = self.container.cloud or CloudSettings()

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
            with tracing.attached(trace_carrier(record.message_attributes)):  # the sender's span
                result = self.container.run(rt.engine.handle(msg))
            self.results[result.value] = self.results.get(result.value, 0) + 1
            if result is StepResult.RETRY_LATER:
                raise StepHandedBack(f"step {msg.run_id}/{msg.step_no} crashed; retried after a backoff")
        except Exception:
            # a crashed step, an unreachable database, a malformed body: back to the queue after
            # 2, 4, 8 … s rather than the queue's whole visibility timeout (the dead-letter queue
            # takes it after its maxReceiveCount)
            attempts = int(record.attributes.approximate_receive_count or 1)
            self._release(cloud, record, min(MAX_RETRY_DELAY_S, 2**attempts))
            raise
        return str(result.value)

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
