"""A Python and a Ruby candidate trade leadership quickly; observers in
both languages' process see every term, in fencing-token order, and never
a leader that is not the leader."""

from lockyard.redis import Election, Session


def test_observe_sees_every_change_across_languages(workers, redis_server):
    py = workers.start_campaigner("py", "leader", "py-node")
    rb = workers.start_campaigner("rb", "leader", "rb-node")
    with Session(redis_server.url) as session:
        watcher = Election(redis_server.url, "leader", session)
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
