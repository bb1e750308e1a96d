"""Review 14 of lockyard.asyncio.etcd (d0d5096): each test fails on that
commit and names the bug it shows."""

from __future__ import annotations

import asyncio
import gc

from etcd_server import Etcd
from lockyard.asyncio.etcd import WaitGroup


async def keys(etcd: Etcd) -> list[str]:
    return await asyncio.to_thread(etcd.keys)


def test_an_adopt_cancelled_midway_leaves_no_slot_that_nobody_holds(
    etcd: Etcd, name: str
) -> None:
    """BUG: ``WaitGroup.adopt`` is awaited without ``runs_to_end`` and the
    core's ``adopt_async`` runs its move with ``runtime::on_runtime``: a
    task cancelled after the move was sent (``asyncio.wait_for``) leaves
    the slot moved onto this group's lease, kept alive for as long as the
    group lives, while the group does not hold it (no fencing token, no
    health; freed by nobody when the adder's lease runs out). Cancelled
    after the answer arrived, the slot is even held, with no ``undo``."""

    async def main() -> None:
        adder = WaitGroup(etcd.url, name, limit=100, ttl=1.0)
        adopter = WaitGroup(etcd.url, name, limit=100, ttl=1.0)
        cancelled = []
        for step in range(80):
            token = await adder.add()
            try:
                await asyncio.wait_for(adopter.adopt(token), timeout=0.0001 + step * 0.0001)
            except asyncio.TimeoutError:
                cancelled.append(token)
        assert cancelled
        # The adder goes away: its lease is no longer kept alive, and the
        # slots left on it run out after its ttl.
        del adder
        gc.collect()
        await asyncio.sleep(3.5)
        live = await keys(etcd)
        orphans = [
            token
            for token in cancelled
            if any(key.endswith(token) for key in live)
            and adopter.fencing_token(token) is None
        ]
        assert not orphans, (
            f"{len(orphans)} of {len(cancelled)} adopts cancelled midway left a live slot "
            f"on the adopter's lease that the adopter does not hold: {orphans}"
        )

    asyncio.run(main())
