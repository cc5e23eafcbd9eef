-- History op=related by meaning (issue 34): one embedding per chat (session) of the text that
-- describes it (title, summary, description), as loomcycle's session_embeddings. Filled lazily by
-- `related` itself (a chat whose text changed since it was embedded is embedded again), so a
-- rename, an annotate or a recap never calls the embedder inside a step's transaction. The
-- vector is a real[] ranked in the process over the few candidates a fold leaves (no pgvector
-- needed); `model` keeps vectors of different models apart.
CREATE TABLE IF NOT EXISTS session_embeddings (
    session_id   text PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    tenant_id    text NOT NULL,
    model        text NOT NULL,
    source_text  text NOT NULL,
    embedding    real[] NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now()
);
SELECT treadle_isolate_tenant('session_embeddings');
