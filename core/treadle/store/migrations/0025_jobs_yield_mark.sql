-- A job enqueued by a worker ending its lease chain names the process that yielded the run and
-- the transcript's last seq then; a claim by that process reads only the events after it and
-- takes the rest from what it kept (store/held.py). NULL: no mark (a full read).
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS yielded_by text;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS known_seq integer;
