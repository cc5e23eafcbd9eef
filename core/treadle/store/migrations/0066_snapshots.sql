-- Snapshots (issue 36 item 3; loomcycle's /v1/_snapshots): a portable, versioned JSON document of
-- the runtime's state (treadle/portable/snapshots.py), kept here until exported, restored or
-- deleted. `tenant_id` NULL: the operator's whole-runtime snapshot; otherwise a tenant admin's, of
-- that tenant only. The routes filter by the caller (no row-level policy: NULL is nobody's tenant).
CREATE TABLE IF NOT EXISTS snapshots (
    id              text PRIMARY KEY,
    tenant_id       text,
    label           text,
    schema_version  integer NOT NULL,
    byte_size       bigint NOT NULL,
    json_content    jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS snapshots_created_ix ON snapshots (created_at DESC);
