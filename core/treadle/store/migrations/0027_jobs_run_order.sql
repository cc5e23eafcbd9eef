-- Runs that finish in order (issue 32): the queue serves a job by its run's age, not by when the
-- job was made, so under a backlog the runs that started first keep advancing and finish near
-- their own latency, instead of every run advancing in lockstep behind the newest runs' first
-- steps. `run_created` is the run's created_at, copied by every statement that enqueues a job.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS run_created timestamptz NOT NULL DEFAULT now();
CREATE INDEX IF NOT EXISTS jobs_run_order_ix ON jobs (run_created, id);
