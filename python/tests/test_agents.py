"""A client given several agents: an agent killed while the client's calls are in flight
costs none of them, and the client moves to an agent that answers."""

import time

import gridwise
from conftest import TOKEN, Daemons


def test_a_client_moves_to_the_other_agent_when_its_agent_is_killed(tmp_path):
    d = Daemons()
    try:
        secrets = ["--client-token", TOKEN, "--server-token", "py-server-secret"]
        agents = [
            d.start(
                "agent", "--listen", "127.0.0.1:0", "--heartbeat-interval-ms", "200",
                "--data-dir", str(tmp_path / name), *secrets,
            )
            for name in ("a", "b")
        ]
        cfg = tmp_path / "server.toml"
        cfg.write_text("agents = [%s]\n" % ", ".join(f'"{a}"' for a in agents))
        for name in ("s1", "s2"):
            d.start(
                "server", "--config", str(cfg), "--listen", "127.0.0.1:0", "--name", name,
                "--slots", "2", "--no-calibrate", *secrets,
            )
        for a in agents:
            c = gridwise.Client(agent=a, token=TOKEN)
            deadline = time.time() + 30
            while len([s for s in c.status()["servers"] if s["state"] == "Up"]) < 2:
                assert time.time() < deadline, f"the servers did not register with {a}"
                time.sleep(0.05)

        client = gridwise.Client(agent=",".join(agents), token=TOKEN)
        first = client.agent
        assert first in agents
        assert client.call("add", 1) == 2
        # Calls in flight and calls still to be placed when the client's agent dies.
        futures = []
        for i in range(60):
            if i == 20:
                d.procs[agents.index(first)].kill()
            futures.append(client.call_async("add", i))
            time.sleep(0.005)
        assert [f.result(timeout=60) for f in futures] == [i + 1 for i in range(60)]
        assert client.agent != first and client.agent in agents
        assert client.status()["servers"], "the agent that lives answers"
    finally:
        d.stop()
