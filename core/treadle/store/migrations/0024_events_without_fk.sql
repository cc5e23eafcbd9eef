-- The step commit appends its events without a foreign-key check (issue 12): the key's trigger
-- ran a query on `runs` and locked the run's row for every event row inserted — a step's commit
-- statement paid it two to four times, about a tenth of the server's work per iteration.
--
-- The key cannot dangle without it: every statement that appends events derives them from the
-- run's row it inserts (start) or updates (append, commit) in the same statement, and holds that
-- row's lock until it commits, so a run being deleted either waits for the append or is already
-- gone (and the append inserts nothing).
-- Deleting runs still deletes their events, as ON DELETE CASCADE did: a statement trigger with the
-- deleted rows, run as the tables' owner (a cascade bypasses row-level security too).
ALTER TABLE events DROP CONSTRAINT IF EXISTS events_run_id_fkey;

CREATE OR REPLACE FUNCTION treadle_delete_run_events() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
BEGIN
    DELETE FROM events e USING gone g WHERE e.run_id = g.id;
    RETURN NULL;
END
$fn$;

DROP TRIGGER IF EXISTS runs_delete_events ON runs;
CREATE TRIGGER runs_delete_events AFTER DELETE ON runs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION treadle_delete_run_events();
