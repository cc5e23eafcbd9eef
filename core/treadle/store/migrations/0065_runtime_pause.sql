-- Runtime pause (issue 36 item 2; loomcycle's /v1/_pause, /v1/_resume, /v1/_state). One row says
-- whether the runtime runs, is pausing (since `since`, until `deadline` at the latest) or is
-- paused. Every replica and the cloud shape's functions read it: a step's lease reads it with the
-- run row (store/steps.py), and a step that finds the runtime paused parks its run on the wait key
-- `runtime:resume` (engine/plan.py `pause`), holding nothing until a resume wakes it.
CREATE TABLE IF NOT EXISTS runtime_state (
    id         boolean PRIMARY KEY DEFAULT true CHECK (id),
    state      text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'pausing', 'paused')),
    since      timestamptz,
    deadline   timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO runtime_state (id) VALUES (true) ON CONFLICT DO NOTHING;
-- the runs parked by a pause, counted and woken across tenants
CREATE INDEX IF NOT EXISTS run_waits_paused_ix ON run_waits (run_id) WHERE key = 'runtime:resume';
