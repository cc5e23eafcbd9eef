-- Substrate: the skills a run was started with, Evaluations, and vector Memory.

-- skill name -> the SkillDef def_id pinned at run start ("yaml" for a skill from treadle.yaml).
ALTER TABLE runs ADD COLUMN IF NOT EXISTS skill_def_ids jsonb;

CREATE TABLE evaluations (
    eval_id             text PRIMARY KEY,
    tenant_id           text NOT NULL,
    run_id              text NOT NULL,
    agent               text NOT NULL,
    def_id              text,                -- the AgentDef the run ran with (NULL: a treadle.yaml agent)
    def_content_sha256  text,
    score               double precision NOT NULL,
    dimensions          jsonb NOT NULL DEFAULT '{}'::jsonb,
    judgement           text,
    rationale           text NOT NULL DEFAULT '',
    emitter_role        text NOT NULL,       -- self | parent | unrelated (a tool) | external (HTTP)
    emitter_agent       text,
    emitter_run_id      text,
    created_at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX evaluations_run_ix ON evaluations (tenant_id, run_id, created_at);
CREATE INDEX evaluations_def_ix ON evaluations (tenant_id, def_id) WHERE def_id IS NOT NULL;
CREATE INDEX evaluations_agent_ix ON evaluations (tenant_id, agent);

-- Vector Memory lives beside `memory` in `memory_embeddings`, which exists only where pgvector
-- does. The function creates it (and installs the extension when the server offers it); the
-- store calls it again when the table is missing, so installing pgvector later needs no new
-- migration. Vectors of any dimension share the table; HNSW (cosine) indexes cover the common
-- dimensions through expression + partial indexes, the others are searched exactly.
CREATE OR REPLACE FUNCTION treadle_ensure_vector_memory() RETURNS boolean
LANGUAGE plpgsql AS $fn$
DECLARE
    d integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector') THEN
        IF NOT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') THEN
            RETURN false;
        END IF;
        BEGIN
            CREATE EXTENSION IF NOT EXISTS vector;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE NOTICE 'pgvector is available but this role may not create it: %', SQLERRM;
            RETURN false;
        END;
    END IF;
    IF to_regclass('memory_embeddings') IS NOT NULL THEN
        RETURN true;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('treadle_ensure_vector_memory'));  -- two lazy creators
    EXECUTE $ddl$
        CREATE TABLE IF NOT EXISTS memory_embeddings (
            tenant_id   text NOT NULL,
            scope       text NOT NULL,
            scope_id    text NOT NULL,
            key         text NOT NULL,
            embedder    text NOT NULL,
            model       text NOT NULL,
            dimension   integer NOT NULL,
            embedding   vector NOT NULL,
            embed_text  text NOT NULL,
            created_at  timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant_id, scope, scope_id, key),
            FOREIGN KEY (tenant_id, scope, scope_id, key)
                REFERENCES memory (tenant_id, scope, scope_id, key) ON DELETE CASCADE
        )
    $ddl$;
    FOREACH d IN ARRAY ARRAY[384, 768, 1024, 1536] LOOP
        EXECUTE format(
            'CREATE INDEX IF NOT EXISTS memory_embeddings_hnsw_%s ON memory_embeddings'
            ' USING hnsw ((embedding::vector(%s)) vector_cosine_ops) WHERE dimension = %s', d, d, d);
    END LOOP;
    RETURN true;
END
$fn$;

SELECT treadle_ensure_vector_memory();
