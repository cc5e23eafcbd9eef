"""The one difference unasync cannot derive: how to wait between retries."""

from __future__ import annotations

import asyncio
import time


async def async_sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


def sleep(seconds: float) -> None:
    time.sleep(seconds)
