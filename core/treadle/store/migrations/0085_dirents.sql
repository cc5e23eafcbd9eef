-- The Path tree (issue 41 item 2): loomcycle's dirents (its 0050 + 0064) — a name
-- (tenant, scope, scope_id, parent_path, name) mapped to a resource (kind + resource_ref), so
-- `/docs/launch` names a Document, `/notes/today` a Memory entry, `/vol/repo` a volume. A dirent
-- is a name, not a grant: the resource's own checks still apply. parent_path is always
-- slash-terminated ("/", "/docs/"); scope_id is '' for the tenant scope. Tenant-isolated (0021).
CREATE TABLE IF NOT EXISTS dirents (
    tenant_id    text        NOT NULL,
    scope        text        NOT NULL CHECK (scope IN ('agent', 'user', 'tenant')),
    scope_id     text        NOT NULL DEFAULT '',
    parent_path  text        NOT NULL,
    name         text        NOT NULL,
    kind         text        NOT NULL CHECK (kind IN ('directory', 'document', 'volume_mount', 'memory_entry')),
    resource_ref jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, scope, scope_id, parent_path, name)
);
-- prefix scans (recursive ls, rm -r, mv of a directory): parent_path LIKE '/docs/%'
CREATE INDEX IF NOT EXISTS dirents_prefix
    ON dirents (tenant_id, scope, scope_id, parent_path text_pattern_ops);
SELECT treadle_isolate_tenant('dirents'::regclass);
