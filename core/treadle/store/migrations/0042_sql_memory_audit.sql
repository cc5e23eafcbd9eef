-- SQL memory's audit trail (issue 41, loomcycle's RFC AA audit events): one row per sql_* op of
-- an agent. The scopes' data lives in a database of its own (store/sqlmem.py); the trail lives
-- here, tenant-keyed, so a tenant's export and erase include it.
CREATE TABLE sql_memory_audit (
    id          bigserial PRIMARY KEY,
    tenant_id   text NOT NULL,
    run_id      text NOT NULL,
    agent       text NOT NULL,
    op          text NOT NULL,
    scope       text NOT NULL,
    scope_id    text NOT NULL,
    statement   text NOT NULL,
    rows        bigint NOT NULL DEFAULT 0,
    duration_ms integer NOT NULL DEFAULT 0,
    error       text,
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sql_memory_audit_run_ix ON sql_memory_audit (tenant_id, run_id);
GRANT SELECT, INSERT, UPDATE, DELETE ON sql_memory_audit TO treadle_tenant;
GRANT USAGE, SELECT, UPDATE ON SEQUENCE sql_memory_audit_id_seq TO treadle_tenant;
SELECT treadle_isolate_tenant('sql_memory_audit'::regclass);
