-- Resident sub-agents (issue 36 item 1; loomcycle's Agent ops open/send/poll/cancel/close): a
-- child run opened with `Agent op=open` stays alive between messages as an interactive run
-- parked for input. Its run row carries the tree (parent_run_id, root_run_id, depth) and the key
-- its parent's calls park on (parent_wait_key); this row adds what only a resident has: its idle
-- time-to-live, when it was last sent to, and when and why it was closed (closed by its parent,
-- an operator, its idle TTL, its parent's end). store/residents.py; tenant-isolated (0021).
CREATE TABLE IF NOT EXISTS resident_children (
    run_id        text        PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    tenant_id     text        NOT NULL,
    parent_run_id text        NOT NULL,
    agent         text        NOT NULL,
    idle_ttl_s    integer     NOT NULL CHECK (idle_ttl_s > 0),
    last_used_at  timestamptz NOT NULL DEFAULT now(),
    closed_at     timestamptz,
    close_reason  text,
    created_at    timestamptz NOT NULL DEFAULT now()
);
-- a parent's open residents (its cap, its end closing them), and the sweeper's scan of open ones
CREATE INDEX IF NOT EXISTS resident_children_open
    ON resident_children (parent_run_id) WHERE closed_at IS NULL;
CREATE INDEX IF NOT EXISTS resident_children_tenant ON resident_children (tenant_id, created_at);
SELECT treadle_isolate_tenant('resident_children'::regclass);
