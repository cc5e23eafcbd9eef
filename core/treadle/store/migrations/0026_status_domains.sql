-- The allowed values of runs.status and memory.scope as domains instead of CHECK constraints
-- (issue 12). Postgres reads a table's CHECK constraints back from their stored text and compiles
-- them for every statement that writes a row of it — on `runs` and `memory`, once per step
-- (the step commit; a folded Memory.incr). A domain's check is compiled once per connection and
-- runs only where a value is assigned to the column: a step that keeps the run's status never
-- evaluates it. The same values are refused, with a check_violation naming the domain.
CREATE DOMAIN run_status AS text
    CHECK (VALUE IN ('queued', 'running', 'waiting', 'completed', 'failed', 'cancelled'));
CREATE DOMAIN memory_scope AS text CHECK (VALUE IN ('agent', 'user', 'tenant'));

-- a column a trigger's WHEN names cannot change its type: the trigger goes and comes back
DROP TRIGGER run_credentials_forget ON runs;
ALTER TABLE runs DROP CONSTRAINT runs_status_ck, ALTER COLUMN status TYPE run_status;
CREATE TRIGGER run_credentials_forget AFTER UPDATE OF status ON runs
    FOR EACH ROW
    WHEN (NEW.status IN ('completed', 'failed', 'cancelled') AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION run_credentials_forget();

ALTER TABLE memory DROP CONSTRAINT memory_scope_ck, ALTER COLUMN scope TYPE memory_scope;
