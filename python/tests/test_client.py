"""The Python client against a real agent and servers: results, arrays, async, cancel,
errors, a graph, and a large array checked element for element."""

import asyncio
import json
import concurrent.futures
import time

import numpy as np
import pytest

import gridwise
from conftest import TOKEN


def test_the_agent_and_token_come_from_the_environment_as_for_the_cli(grid, monkeypatch):
    monkeypatch.setenv("GRIDWISE_AGENT", grid)
    monkeypatch.setenv("GRIDWISE_TOKEN", TOKEN)
    assert gridwise.Client().call("add", 1) == 2
    monkeypatch.delenv("GRIDWISE_AGENT")
    # An address given in code takes the token from the environment too.
    assert gridwise.Client(agent=grid).call("add", 2) == 3
    with pytest.raises(gridwise.ConfigfileNotFound, match="GRIDWISE_AGENT"):
        gridwise.Client()


def test_scalar_call_and_details(client):
    assert client.call("add", 41) == 42
    out, details = client.call_detailed("add", 1)
    assert out == 2
    assert details["server"] in ("s1", "s2")
    assert details["round_trip_s"] > 0


def test_dgemm_with_numpy_sizes_from_shapes_and_orders(client):
    rng = np.random.default_rng(1)
    a = rng.random((30, 20))
    b = rng.random((20, 10))
    c = client.call("dgemm", a, b)
    assert c.shape == (30, 10) and c.dtype == np.float64
    np.testing.assert_allclose(c, a @ b, rtol=1e-12)
    # Every input given, and Fortran-ordered arrays: the same product.
    c2 = client.call("dgemm", 30, 10, 20, np.asfortranarray(a), np.asfortranarray(b))
    np.testing.assert_allclose(c2, a @ b, rtol=1e-12)
    # Lists are arrays of the declared type.
    assert client.call("dgemm", [[1.0, 2.0]], [[3.0], [4.0]]).tolist() == [[11.0]]
    # Outputs are ordinary, writable arrays.
    c[0, 0] = -1.0


def test_wrong_dtype_and_shape_are_refused_clearly(client):
    with pytest.raises(TypeError, match="must be float64.*got int64"):
        client.call("dgemm", np.ones((2, 2), dtype=np.int64), np.ones((2, 2)))
    with pytest.raises(TypeError, match="takes 5 inputs"):
        client.call("dgemm", np.ones((2, 2)))
    with pytest.raises(ValueError, match="2 dimension"):
        client.call("dgemm", 2, 2, 2, np.ones(4), np.ones((2, 2)))
    with pytest.raises(gridwise.OtherError, match="means 3x2, but a 2x2 array"):
        client.call("dgemm", 3, 2, 2, np.ones((2, 2)), np.ones((2, 2)))


def test_errors_are_named_after_gridrpc_codes(client, grid):
    with pytest.raises(gridwise.FunctionNotFound) as e:
        client.call("no_such_service", 1)
    assert e.value.code == 5 and isinstance(e.value, gridwise.GridRPCError)
    with pytest.raises(gridwise.SessionFailed, match="on purpose"):
        client.call("fail", "on purpose")
    with pytest.raises(gridwise.ServerNotFound):
        client.call("add", 1, server="127.0.0.1:1")
    with pytest.raises(gridwise.RpcRefused):
        gridwise.Client(agent=grid, token="wrong").call("add", 1)


def test_async_from_threads_wait_any_and_as_completed(client):
    futs = [client.call_async("add", i) for i in range(50)]
    first = client.wait_any(futs)
    assert first.result() == futs.index(first) + 1
    got = sorted(f.result() for f in gridwise.as_completed(futs))
    assert got == list(range(1, 51))
    assert all(f.details["server"] in ("s1", "s2") for f in futs)
    bad = client.call_async("fail", "async failure")
    with pytest.raises(gridwise.SessionFailed, match="async failure"):
        bad.result(timeout=30)


def test_asyncio(client):
    async def main():
        return await asyncio.gather(*(client.acall("add", i) for i in range(20)))

    assert asyncio.run(main()) == list(range(1, 21))


def test_cancel_stops_a_running_call(client):
    fut = client.call_async("loop", 0)
    time.sleep(0.3)
    assert not fut.done()
    start = time.time()
    assert client.cancel(fut)
    assert time.time() - start < 10
    assert fut.cancelled()
    with pytest.raises(concurrent.futures.CancelledError):
        fut.result()
    assert client.call("add", 1) == 2


def test_services_are_listed_with_signatures(client):
    names = {s.name: s for s in client.services()}
    assert "dgemm" in names
    assert names["dgemm"].signature.startswith("dgemm(m: int, n: int, k: int, A: matrix<f64>[m,k]")
    assert client.service("add").outputs[0].name == "y"


def test_a_graph_chains_dgemm_on_the_servers(client):
    rng = np.random.default_rng(2)
    a = rng.random((40, 40))
    b = rng.random((40, 40))
    g = client.graph()
    c1 = g.call("dgemm", a, b)
    c2 = g.call("dgemm", 40, 40, 40, c1.output(0), b)
    r = g.run()
    assert r.outputs(c1) is None
    np.testing.assert_allclose(r.outputs(c2), (a @ b) @ b, rtol=1e-10)
    assert r.makespan_s > 0 and len(r.servers) == 2


def test_a_64_mib_array_round_trips_element_for_element(client):
    n = 2896  # 2896^2 doubles = 64 MiB
    a = np.random.default_rng(3).random((n, n))
    ident = np.eye(n)
    c = client.call("dgemm", a, ident)
    assert np.array_equal(c, a)


def test_arrays_stay_their_own_when_the_buffers_of_finished_calls_are_used_again(client):
    """A call's large arrays go back to a pool when done with (its inputs at once, its outputs
    when numpy lets them go) and the next call of that size fills them: an array a call
    returned must stay its own, writable, for as long as it is alive."""
    n = 1 << 20  # 8 MiB of doubles: large enough to be pooled
    alive = {}
    for i in range(8):
        y = client.call("echo", np.full(n, float(i)))
        y[0] = -i
        alive[i] = y
        if i % 3 == 2:
            # Some go back while others are held.
            del alive[i - 1], y
    for i, y in alive.items():
        assert y[0] == -i and np.all(y[1:] == float(i)), f"array {i} was overwritten"


def test_config_file_and_bad_configs(grid, tmp_path):
    cfg = tmp_path / "client.toml"
    cfg.write_text(f'agent = "{grid}"\ntoken = "{TOKEN}"\n')
    assert gridwise.Client(config=str(cfg)).call("add", 2) == 3
    with pytest.raises(gridwise.ConfigfileNotFound):
        gridwise.Client(config=str(tmp_path / "missing.toml"))
    broken = tmp_path / "broken.toml"
    broken.write_text("agent = [\n")
    with pytest.raises(gridwise.ConfigfileError):
        gridwise.Client(config=str(broken))


def test_divide_cuts_a_job_and_returns_the_parts_in_order(client):
    x = np.arange(100_000, dtype=np.float64)
    runs = client.divide("echo", len(x), lambda first, n: (n, x[first:first + n]), unit="n", all=True)
    parts = runs[0]["parts"]
    assert sum(p["units"] for p in parts) == len(x)
    assert {p["server"] for p in parts} <= {"s1", "s2"}
    back = np.concatenate([p["outputs"][0] for p in parts])
    assert np.array_equal(back, x)
    assert runs[0]["makespan_s"] > 0


def test_the_module_cli_takes_options_after_the_command_and_prints_the_clis_tables(grid):
    """`python -m gridwise status --agent X --token Y` as the CLI takes it, and the same
    tables the CLI prints (argparse once refused options after the command and printed
    raw JSON)."""
    import subprocess
    import sys

    from conftest import gridwise_binary

    conn = ["--agent", grid, "--token", TOKEN]

    def py(*args):
        r = subprocess.run(
            [sys.executable, "-m", "gridwise", *args], capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, r.stderr
        return r.stdout

    def cli(*args):
        r = subprocess.run([gridwise_binary(), *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout

    assert py("services", *conn) == cli("services", *conn)
    assert py(*conn, "services", "--describe") == cli("services", "--describe", *conn)
    ours, theirs = py("status", *conn).splitlines(), cli("status", *conn).splitlines()
    # The uptime and the time since each heartbeat move between the two runs; the rest not.
    assert ours[1] == theirs[1] and "speed Gop/s" in ours[1]
    assert [r.split()[:3] for r in ours[2:]] == [r.split()[:3] for r in theirs[2:]]
    assert {"s1", "s2"} <= {r.split()[0] for r in ours[2:]}
    status = json.loads(py("status", "--json", *conn))
    assert {s["name"] for s in status["servers"]} >= {"s1", "s2"}
    assert py("call", "add", "41", *conn).strip() == "42"
    assert py("call", "add", "41", "--server", "s2", *conn).strip() == "42"
