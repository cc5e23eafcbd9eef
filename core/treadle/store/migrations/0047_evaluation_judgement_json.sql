-- loomcycle's Evaluation.submit takes `judgement` as a free-form JSON value (its evaluation.go:
-- json.RawMessage, at most 32 KiB); treadle stored a string of at most 256 characters. A stored
-- string stays the same value (a JSON string).
ALTER TABLE evaluations ALTER COLUMN judgement TYPE jsonb USING to_jsonb(judgement);
