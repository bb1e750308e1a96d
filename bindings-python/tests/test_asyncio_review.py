"""Review of lockyard.asyncio.redis: each test reproduces one finding."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable

import lockyard
from lockyard.asyncio.redis import WaitGroup
from redis_server import Redis

Spawn = Callable[..., "subprocess.Popen[str]"]


def test_one_slot_entered_by_two_tasks_leaks_no_slot(redis: Redis, name: str) -> None:
    async def main() -> None:
        group = WaitGroup(redis.url, name, limit=5)
        slot = group.slot()

        async def use() -> None:
            async with slot:
                await asyncio.sleep(0.05)

        results = await asyncio.gather(use(), use(), return_exceptions=True)
        assert await group.count() == 0, f"a slot stayed taken: {results}"
        assert results[0] is None
        assert isinstance(results[1], lockyard.ConfigError), results

    asyncio.run(main())
