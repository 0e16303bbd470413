"""`run_on`: run one coroutine of a command on a resource opened for it (the keys, the grants, the feedback of the
configured database) and closed after it, from a synchronous typer command."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

R = TypeVar("R")
T = TypeVar("T")


def run_on(opened: Callable[[], AbstractAsyncContextManager[R]], fn: Callable[[R], Awaitable[T]]) -> T:
    """`fn` of the resource `opened()` enters, in a new event loop; the resource is closed after it, whatever `fn`
    did. Raises whatever opening the resource or `fn` raises."""

    async def run() -> T:
        async with opened() as resource:
            return await fn(resource)

    return asyncio.run(run())
