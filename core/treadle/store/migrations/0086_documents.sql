-- Documents (issue 41 item 3): loomcycle's RFC AK chunked-graph documents. loomcycle keeps the
-- structure in each scope's SQL-memory database and the bodies in Memory; treadle keeps both in
-- its own tables, keyed (tenant_id, scope, scope_id) like Memory, so a chunk's structure, body
-- and revision change in one transaction (the step's, for the Document tool) and row-level
-- security (0021) isolates tenants. Ids are random; every key and reference carries the scope,
-- so an id of another scope (or tenant) is "no such chunk". Deletes cascade by foreign key: a
-- document takes its chunks, a chunk its subtree, edges and revisions.
CREATE TABLE IF NOT EXISTS documents (
    tenant_id     text        NOT NULL,
    scope         text        NOT NULL CHECK (scope IN ('agent', 'user', 'tenant')),
    scope_id      text        NOT NULL DEFAULT '',
    id            text        NOT NULL,
    title         text        NOT NULL,
    root_chunk_id text        NOT NULL,
    type          text,
    status        text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, scope, scope_id, id)
);
CREATE TABLE IF NOT EXISTS chunks (
    tenant_id   text        NOT NULL,
    scope       text        NOT NULL,
    scope_id    text        NOT NULL,
    id          text        NOT NULL,
    document_id text        NOT NULL,
    parent_id   text,
    position    integer     NOT NULL DEFAULT 0,
    type        text,
    status      text,
    title       text        NOT NULL,
    body        text        NOT NULL DEFAULT '',
    fields      jsonb,
    -- optimistic concurrency: update_chunk names the revision it read; a stale one changes nothing
    revision    integer     NOT NULL DEFAULT 1,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, scope, scope_id, id),
    FOREIGN KEY (tenant_id, scope, scope_id, document_id)
        REFERENCES documents (tenant_id, scope, scope_id, id) ON DELETE CASCADE,
    FOREIGN KEY (tenant_id, scope, scope_id, parent_id)
        REFERENCES chunks (tenant_id, scope, scope_id, id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS chunks_by_parent ON chunks (tenant_id, scope, scope_id, document_id, parent_id, position);
CREATE INDEX IF NOT EXISTS chunks_by_type_status ON chunks (tenant_id, scope, scope_id, type, status);
CREATE INDEX IF NOT EXISTS chunks_children ON chunks (tenant_id, scope, scope_id, parent_id);
CREATE TABLE IF NOT EXISTS chunk_edges (
    tenant_id  text        NOT NULL,
    scope      text        NOT NULL,
    scope_id   text        NOT NULL,
    from_id    text        NOT NULL,
    to_id      text        NOT NULL,
    kind       text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, scope, scope_id, from_id, to_id, kind),
    FOREIGN KEY (tenant_id, scope, scope_id, from_id) REFERENCES chunks (tenant_id, scope, scope_id, id) ON DELETE CASCADE,
    FOREIGN KEY (tenant_id, scope, scope_id, to_id) REFERENCES chunks (tenant_id, scope, scope_id, id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS chunk_edges_to ON chunk_edges (tenant_id, scope, scope_id, to_id, kind);
-- a chunk type: its fields (a JSON Schema object validates a chunk's `fields`); document_id ''
-- = every document of the scope
CREATE TABLE IF NOT EXISTS chunk_types (
    tenant_id   text        NOT NULL,
    scope       text        NOT NULL,
    scope_id    text        NOT NULL,
    document_id text        NOT NULL DEFAULT '',
    name        text        NOT NULL,
    fields      jsonb       NOT NULL DEFAULT '[]'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, scope, scope_id, document_id, name)
);
-- the body at each revision where it changed (create: 1, each update with a body: the new one)
CREATE TABLE IF NOT EXISTS chunk_revisions (
    tenant_id  text        NOT NULL,
    scope      text        NOT NULL,
    scope_id   text        NOT NULL,
    chunk_id   text        NOT NULL,
    revision   integer     NOT NULL,
    body       text        NOT NULL,
    actor      text,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, scope, scope_id, chunk_id, revision),
    FOREIGN KEY (tenant_id, scope, scope_id, chunk_id) REFERENCES chunks (tenant_id, scope, scope_id, id) ON DELETE CASCADE
);
SELECT treadle_isolate_tenant('documents'::regclass);
SELECT treadle_isolate_tenant('chunks'::regclass);
SELECT treadle_isolate_tenant('chunk_edges'::regclass);
SELECT treadle_isolate_tenant('chunk_types'::regclass);
SELECT treadle_isolate_tenant('chunk_revisions'::regclass);
