"""Identifiers: the one shape every name a caller or config gives treadle takes — agents, skills,
defs, channels' scope ids, tenants, users, schedules and webhooks: 1 to 128 of A-Z a-z 0-9 _ -."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import StringConstraints

IDENTIFIER_PATTERN = r"^[A-Za-z0-9_-]{1,128}$"
IDENTIFIER_RULE = "1-128 characters of A-Z a-z 0-9 _ -"
#: a tenant id: an identifier of at most 64 characters
TENANT_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
_IDENTIFIER = re.compile(IDENTIFIER_PATTERN)

#: a pydantic field type for identifiers
Identifier = Annotated[str, StringConstraints(pattern=IDENTIFIER_PATTERN)]


def is_identifier(value: Any) -> bool:
    return isinstance(value, str) and _IDENTIFIER.match(value) is not None
