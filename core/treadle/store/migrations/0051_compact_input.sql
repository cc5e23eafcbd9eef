-- A manual compaction of a run parked for input travels through the run's steering queue (issue
-- 34): the server summarizes, queues a `compact` item, and the run's next step records the
-- `context_compaction` event and parks again (engine/plan.py `steer`).
ALTER TABLE run_inputs DROP CONSTRAINT IF EXISTS run_inputs_kind_ck;
ALTER TABLE run_inputs ADD CONSTRAINT run_inputs_kind_ck CHECK (kind IN ('input', 'turn_cancel', 'compact'));
