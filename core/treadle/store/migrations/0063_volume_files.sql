-- Who wrote which volume file (issue 42 item 4): a file tool's write for a run of a user records
-- (tenant, user, location, path) before the file is written, so erasing the user finds the files
-- its runs wrote in persistent volumes and deletes them (host directory or S3) — the effect
-- journal (volume_effects) is forgotten when a run ends; this is kept as long as the file is.
CREATE TABLE IF NOT EXISTS volume_files (
    tenant_id   text NOT NULL,
    user_id     text NOT NULL,
    location    text NOT NULL,
    path        text NOT NULL,
    written_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, user_id, location, path)
);
SELECT treadle_isolate_tenant('volume_files'::regclass);
