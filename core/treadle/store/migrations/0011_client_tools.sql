-- Application ("client") tools: declared by the caller per run; a call parks the run until the
-- application posts the result (POST /v1/runs/{id}/tool_results).
ALTER TABLE runs ADD COLUMN client_tools jsonb;
ALTER TABLE runs ADD COLUMN client_tool_timeout_s double precision;

CREATE TABLE client_tool_results (
    run_id       text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    tool_use_id  text NOT NULL,
    tenant_id    text NOT NULL,
    content      text NOT NULL,
    is_error     boolean NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, tool_use_id)
);
