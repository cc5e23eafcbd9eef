-- Content-addressed definitions (AgentDef, SkillDef, ScheduleDef, WebhookDef, ...): immutable
-- versions with lineage, plus one active pointer per (tenant, kind, name).
CREATE TABLE defs (
    def_id             text PRIMARY KEY,
    tenant_id          text NOT NULL,
    kind               text NOT NULL,
    name               text NOT NULL,
    version            integer NOT NULL,
    content_sha256     text NOT NULL,
    body               jsonb NOT NULL,
    parent_def_id      text REFERENCES defs (def_id),
    status             text NOT NULL DEFAULT 'active',
    description        text NOT NULL DEFAULT '',
    created_by_run_id  text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    retired_at         timestamptz,
    CONSTRAINT defs_status_ck CHECK (status IN ('active', 'retired')),
    CONSTRAINT defs_version_uq UNIQUE (tenant_id, kind, name, version)
);
CREATE INDEX defs_lookup_ix ON defs (tenant_id, kind, name, version DESC);
CREATE INDEX defs_parent_ix ON defs (parent_def_id) WHERE parent_def_id IS NOT NULL;

CREATE TABLE def_active (
    tenant_id    text NOT NULL,
    kind         text NOT NULL,
    name         text NOT NULL,
    def_id       text NOT NULL REFERENCES defs (def_id),
    promoted_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, kind, name)
);

ALTER TABLE runs ADD COLUMN IF NOT EXISTS def_content_sha256 text;
