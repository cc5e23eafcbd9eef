-- Observability: the W3C trace context of a run's `run {agent}` span ({"traceparent": …,
-- "tracestate": …}), written when the run is created and read by every lease, so each step's
-- span joins the run's trace on whichever worker claims it. NULL when tracing is off.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS trace_context jsonb;
