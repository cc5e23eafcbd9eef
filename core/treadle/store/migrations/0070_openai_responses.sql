-- Stored responses of OpenAI's Responses API (issue 38): `store` (OpenAI's default true) keeps a
-- response so GET /v1/responses/{id}, `previous_response_id`, input_items, DELETE and (for
-- `background: true`) cancel and a resumed stream (`starting_after`) can find it. An agent's
-- response is a turn of a durable run: `run_id` and `start_seq` (the run's last seq before the
-- turn) say where; its document and stream events are derived from the run's transcript, so a
-- restarted process answers them identically. `doc` is the finished document (NULL while an
-- agent's turn is under way).
CREATE TABLE IF NOT EXISTS openai_responses (
    tenant_id             text NOT NULL,
    id                    text NOT NULL,
    user_id               text,
    created_at            timestamptz NOT NULL DEFAULT now(),
    created_unix          bigint NOT NULL,
    background            boolean NOT NULL DEFAULT false,
    request               jsonb NOT NULL,
    input_items           jsonb NOT NULL,
    previous_response_id  text,
    run_id                text,
    start_seq             integer,
    doc                   jsonb,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX IF NOT EXISTS openai_responses_user_ix ON openai_responses (tenant_id, user_id)
    WHERE user_id IS NOT NULL;
SELECT treadle_isolate_tenant('openai_responses');
