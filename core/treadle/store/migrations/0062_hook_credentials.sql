-- Tool-use hooks take tenant credentials by name (issue 42 item 3): `headers` sent with every
-- call (a value may reference `${credential.NAME}`), and `secret_credential`, the CredentialDef
-- whose value signs the call instead of the variable `secret_env` names (a tenant sets no
-- variables of treadle's environment). Names only: a value is resolved per call, never stored here.
ALTER TABLE tool_hooks ADD COLUMN IF NOT EXISTS headers jsonb NOT NULL DEFAULT '{}';
ALTER TABLE tool_hooks ADD COLUMN IF NOT EXISTS secret_credential text;
