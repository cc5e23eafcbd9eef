-- The usage roll-up moves from a row trigger on `events` (0045) into the statements that append a
-- run's events (the step commit and the mid-step append, store/usage.py `ROLLUP_CTE`): the same
-- rows and figures, in the same transaction, without a PL/pgSQL call (with its own search path)
-- and three statements per model call — ~0.2 ms of the server's CPU per loop iteration
-- (issue 31: the loop benchmark's verdict). Every `usage` event is written by those two
-- statements (engine/step.py `_assistant_events`).
DROP TRIGGER IF EXISTS events_usage_rollup ON events;
DROP FUNCTION IF EXISTS treadle_usage_rollup();
