-- Memory search, complete (issue 41 item 4) and Document tags (item 3).
--
-- `memory.provenance`: where an entry came from — NULL for a note an agent wrote with a plain
-- `set`; an object ({origin, class, source_run_id, source_session_id}) for a fact (`add` with
-- `infer`, or a `set` that names its provenance). `sources: [facts]` / `[notes]` filter on it.
ALTER TABLE memory ADD COLUMN IF NOT EXISTS provenance jsonb;

-- How often search returned an entry (loomcycle's access_count, the `frequency_weight` signal);
-- apart from `memory` so counting a read never touches the entry's bytes or its updated_at.
CREATE TABLE IF NOT EXISTS memory_access (
    tenant_id  text        NOT NULL,
    scope      text        NOT NULL,
    scope_id   text        NOT NULL,
    key        text        NOT NULL,
    count      bigint      NOT NULL DEFAULT 0,
    last_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, scope, scope_id, key),
    FOREIGN KEY (tenant_id, scope, scope_id, key) REFERENCES memory (tenant_id, scope, scope_id, key) ON DELETE CASCADE
);
SELECT treadle_isolate_tenant('memory_access'::regclass);

-- loomcycle's Document tags: a chunk's and a document's (nested with '/': area/sub)
CREATE TABLE IF NOT EXISTS chunk_tags (
    tenant_id text NOT NULL,
    scope     text NOT NULL,
    scope_id  text NOT NULL,
    chunk_id  text NOT NULL,
    tag       text NOT NULL,
    PRIMARY KEY (tenant_id, scope, scope_id, chunk_id, tag),
    FOREIGN KEY (tenant_id, scope, scope_id, chunk_id) REFERENCES chunks (tenant_id, scope, scope_id, id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS chunk_tags_by_tag ON chunk_tags (tenant_id, scope, scope_id, tag);
CREATE TABLE IF NOT EXISTS document_tags (
    tenant_id   text NOT NULL,
    scope       text NOT NULL,
    scope_id    text NOT NULL,
    document_id text NOT NULL,
    tag         text NOT NULL,
    PRIMARY KEY (tenant_id, scope, scope_id, document_id, tag),
    FOREIGN KEY (tenant_id, scope, scope_id, document_id)
        REFERENCES documents (tenant_id, scope, scope_id, id) ON DELETE CASCADE
);
SELECT treadle_isolate_tenant('chunk_tags'::regclass);
SELECT treadle_isolate_tenant('document_tags'::regclass);

-- A chunk body's embedding (Memory search's `documents` source, Document `search`): beside
-- memory_embeddings, so it too exists only where pgvector does and is made by the same lazy
-- creator (which now makes both).
CREATE OR REPLACE FUNCTION treadle_ensure_vector_memory() RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
DECLARE
    d integer;
BEGIN
    IF NOT treadle_ensure_vector_table() THEN
        RETURN false;
    END IF;
    IF NOT (SELECT relrowsecurity FROM pg_class WHERE oid = 'memory_embeddings'::regclass) THEN
        PERFORM treadle_isolate_tenant('memory_embeddings'::regclass);
    END IF;
    IF to_regclass('chunk_embeddings') IS NULL THEN
        PERFORM pg_advisory_xact_lock(hashtext('treadle_ensure_chunk_embeddings'));
        EXECUTE $ddl$
            CREATE TABLE IF NOT EXISTS chunk_embeddings (
                tenant_id  text        NOT NULL,
                scope      text        NOT NULL,
                scope_id   text        NOT NULL,
                chunk_id   text        NOT NULL,
                embedder   text        NOT NULL,
                model      text        NOT NULL,
                dimension  integer     NOT NULL,
                embedding  vector      NOT NULL,
                created_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (tenant_id, scope, scope_id, chunk_id),
                FOREIGN KEY (tenant_id, scope, scope_id, chunk_id)
                    REFERENCES chunks (tenant_id, scope, scope_id, id) ON DELETE CASCADE
            )
        $ddl$;
        FOREACH d IN ARRAY ARRAY[384, 768, 1024, 1536] LOOP
            EXECUTE format(
                'CREATE INDEX IF NOT EXISTS chunk_embeddings_hnsw_%s ON chunk_embeddings'
                ' USING hnsw ((embedding::vector(%s)) vector_cosine_ops) WHERE dimension = %s', d, d, d);
        END LOOP;
        PERFORM treadle_isolate_tenant('chunk_embeddings'::regclass);
    END IF;
    RETURN true;
END
$fn$;

SELECT treadle_ensure_vector_memory();
