-- A snapshot restore that carries SQL-memory scopes (issue 41 item 5; store/sqlmemrestore.py):
-- its id, written in the transaction that writes the snapshot's rows — the restore's commit
-- point. The scopes were staged beforehand in the SQL-memory database; a process killed after
-- this commit leaves them for the sweeper, which moves them into place when it finds the id
-- here (and drops them when it does not). No tenant_id: a restore is the runtime's bookkeeping.
CREATE TABLE IF NOT EXISTS snapshot_sql_restores (
    restore_id  text PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now()
);
GRANT SELECT, INSERT, DELETE ON snapshot_sql_restores TO treadle_tenant;
