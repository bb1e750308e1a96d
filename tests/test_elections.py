"""A Python and a Ruby candidate trade leadership quickly, on Redis and on
etcd; an observer sees every term, in fencing-token order, and never a
leader that is not the leader."""

import pytest
from lockyard import etcd, redis


@pytest.mark.parametrize("backend", ["redis", "etcd"])
def test_observe_sees_every_change_across_languages(backend, request):
    workers = request.getfixturevalue(
        "workers" if backend == "redis" else "etcd_workers"
    )
    module = redis if backend == "redis" else etcd
    url = workers.server.url
    py = workers.start_campaigner("py", "leader", "py-node")
    rb = workers.start_campaigner("rb", "leader", "rb-node")
    with module.Session(url) as session:
        watcher = module.Election(url, "leader", session)
        observer = watcher.observe(timeout=1.0)
        assert next(observer).value is None
        fences = []
        for candidate, command in [
            (py, "campaign"),
            (py, "resign"),
            (rb, "campaign"),
            (rb, "resign"),
            (py, "campaign"),
        ]:
            answer = candidate.tell(command)
            fences.append(answer["fence"])
            if command == "campaign":
                expected = f"{candidate.lang}-node"
                assert watcher.leader() == expected
        terms = list(observer)
        py.tell("resign")
    assert [t.value for t in terms] == ["py-node", None, "rb-node", None, "py-node"]
    assert [t.fencing_token for t in terms] == fences
    assert fences[0] == fences[1] < fences[2] == fences[3] < fences[4]
    for candidate in (py, rb):
        candidate.process.stdin.write("exit\n")
        candidate.process.stdin.flush()
        candidate.finish()
