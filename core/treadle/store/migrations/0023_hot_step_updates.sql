-- HOT step commits (issue 12): a chained step's commit rewrites only columns no index holds, so
-- Postgres updates the run row in place on its page (a heap-only tuple) instead of adding an entry
-- to every index of `runs`.
-- `updated_at` changes at every commit; the index of parked runs keyed on it is keyed on
-- `created_at` instead (nothing orders parked runs by their last change).
DROP INDEX IF EXISTS runs_waiting_ix;
CREATE INDEX IF NOT EXISTS runs_waiting_ix ON runs (tenant_id, created_at DESC) WHERE status = 'waiting';
-- room on each page for the in-place versions (applies to pages written from now on)
ALTER TABLE runs SET (fillfactor = 85);
