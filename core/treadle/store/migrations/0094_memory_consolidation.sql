-- Memory consolidation (loomcycle's RFC BL P2, its migration 0061): the substrate a consolidator
-- agent (`memory_consolidation: true`, e.g. loomcycle's memory bundle) works on.
--
-- `memory.superseded_at`: a soft archive. A superseded entry is hidden from get / list / search /
-- recall but kept (audit, rollback); writing its key again revives it. NULL = live.
ALTER TABLE memory ADD COLUMN IF NOT EXISTS superseded_at timestamptz;

-- The queue `Memory add` writes to while a consolidator is deployed; a pass drains it. drained_at
-- is a soft marker: a drained row is kept (retention sweeps it with the memory class) and never
-- drained twice.
CREATE TABLE IF NOT EXISTS memory_pending (
    id                text        NOT NULL,
    tenant_id         text        NOT NULL,
    scope             text        NOT NULL,
    scope_id          text        NOT NULL,
    payload           jsonb       NOT NULL,
    origin            text        NOT NULL DEFAULT 'agent_explicit',
    source_session_id text,
    source_run_id     text,
    created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    drained_at        timestamptz,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX IF NOT EXISTS memory_pending_undrained
    ON memory_pending (tenant_id, scope, scope_id, created_at, id) WHERE drained_at IS NULL;
SELECT treadle_isolate_tenant('memory_pending'::regclass);

-- Per target (tenant, scope, scope_id): the forward-only watermark (the last settled chat a pass
-- consolidated, by its settled time and session id) and the lease one pass holds.
CREATE TABLE IF NOT EXISTS memory_cursors (
    tenant_id              text        NOT NULL,
    scope                  text        NOT NULL,
    scope_id               text        NOT NULL,
    watermark_completed_at timestamptz,
    watermark_session_id   text        NOT NULL DEFAULT '',
    leased_by              text        NOT NULL DEFAULT '',
    lease_expires_at       timestamptz,
    updated_at             timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, scope, scope_id)
);
SELECT treadle_isolate_tenant('memory_cursors'::regclass);
