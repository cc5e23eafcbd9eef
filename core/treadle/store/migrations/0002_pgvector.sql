-- pgvector (vector columns for Memory embeddings): enabled wherever the server ships it — Aurora
-- PostgreSQL in the cloud shape, the embedded Postgres in the sidecar. A server without it keeps
-- working; vector features then report "pgvector not installed".
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') THEN
        CREATE EXTENSION IF NOT EXISTS vector;
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'pgvector is available but this role may not create it: %', SQLERRM;
END
$$;
