"""A Lock behind Redis Sentinel: the URL names the sentinels and the master
(failover itself is tested in core/tests/redis_sentinel.rs)."""

from __future__ import annotations

from pathlib import Path

import lockyard
import pytest
from lockyard.redis import Lock
from redis_server import Redis, Sentinel


def test_a_sentinel_url_locks_on_the_master_it_names(
    redis: Redis, tmp_path: Path, name: str
) -> None:
    sentinel = Sentinel(tmp_path, redis, "locks")
    try:
        first, second = Lock(sentinel.url, name), Lock(sentinel.url, name)
        with first:
            assert not second.try_acquire()
            assert first.fencing_token
        assert second.try_acquire()
        assert redis.command("EXISTS", f"lockyard:{{{name}}}:fence") == 1
        second.release()
    finally:
        sentinel.stop()


@pytest.mark.parametrize(
    "bad_url",
    [
        "redis+sentinel://127.0.0.1:26379",
        "redis+sentinel://127.0.0.1:26379/locks/notadb",
        "redis+sentinel://127.0.0.1:26379/locks?password=secret",
    ],
)
def test_bad_sentinel_urls_raise_config_error(bad_url: str) -> None:
    with pytest.raises(lockyard.ConfigError, match="Sentinel URL") as error:
        Lock(bad_url, "deploy")
    assert "secret" not in str(error.value)
