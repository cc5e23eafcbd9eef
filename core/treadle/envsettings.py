"""Settings read from the environment: a pydantic model whose fields default from `TREADLE_<NAME>`.

A small stand-in for pydantic-settings (which, with python-dotenv, costs ~20 ms of every cold
start and offers nothing treadle uses beyond this): a field `lease_seconds` reads
`TREADLE_LEASE_SECONDS` (names are case-insensitive), a field with a string `validation_alias`
reads that variable instead (`DATABASE_URL`), keyword arguments win over the environment, and the
strings are converted by pydantic's lax mode ("8" → 8, "true"/"1"/"yes" → True, "0.5" → 0.5).
Unknown `TREADLE_*` variables are ignored (every settings class reads its own subset).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

ENV_PREFIX = "TREADLE_"


class EnvSettings(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    #: the environment read when none is passed (tests pass their own mapping to `from_env`)
    env_prefix: ClassVar[str] = ENV_PREFIX

    def __init__(self, **values: Any) -> None:
        super().__init__(**{**env_values(type(self), os.environ), **values})

    @classmethod
    def from_env(cls, env: Mapping[str, str], **values: Any) -> EnvSettings:
        """The settings from `env` instead of the process environment."""
        return cls.model_validate({**env_values(cls, env), **values})


def env_values(cls: type[EnvSettings], env: Mapping[str, str]) -> dict[str, str]:
    """The fields of `cls` that `env` sets, by field name, as strings."""
    upper = {k.upper(): v for k, v in env.items()}
    found: dict[str, str] = {}
    for name, info in cls.model_fields.items():
        alias = info.validation_alias
        var = alias if isinstance(alias, str) else cls.env_prefix + name
        value = upper.get(var.upper())
        if value is not None:
            found[name] = value
    return found
