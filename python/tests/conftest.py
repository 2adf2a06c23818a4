"""A real grid for the tests: a gridwise agent and two servers on 127.0.0.1 (ephemeral ports),
started from the workspace's `gridwise` binary and killed when the session ends."""

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import gridwise

TOKEN = "py-client-secret"
ROOT = Path(__file__).resolve().parents[2]


def gridwise_binary() -> str:
    env = os.environ.get("GRIDWISE_BIN")
    if env:
        return env
    for profile in ("debug", "release"):
        p = ROOT / "target" / profile / "gridwise"
        if p.exists():
            return str(p)
    found = shutil.which("gridwise")
    if found:
        return found
    raise RuntimeError("no gridwise binary: build it (cargo build -p gridwise) or set GRIDWISE_BIN")


class Daemons:
    def __init__(self) -> None:
        self.procs = []
        self.dir = tempfile.TemporaryDirectory()

    def start(self, *args: str) -> str:
        log = open(Path(self.dir.name) / f"d{len(self.procs)}.log", "wb")
        p = subprocess.Popen(
            [gridwise_binary(), *args],
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=self.dir.name,
        )
        self.procs.append(p)
        deadline = time.time() + 60
        while time.time() < deadline:
            line = p.stdout.readline().decode()
            if line.startswith("listening "):
                return line.split()[1]
            if p.poll() is not None:
                break
        raise RuntimeError(f"{args[0]} did not start; see {log.name}")

    def stop(self) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait(timeout=10)
        self.dir.cleanup()


@pytest.fixture(scope="session")
def grid():
    d = Daemons()
    try:
        secrets = ["--client-token", TOKEN, "--server-token", "py-server-secret"]
        agent = d.start(
            "agent", "--listen", "127.0.0.1:0", "--heartbeat-interval-ms", "200",
            "--data-dir", str(Path(d.dir.name) / "data"), *secrets,
        )
        for name in ("s1", "s2"):
            d.start(
                "server", "--listen", "127.0.0.1:0", "--agent", agent, "--name", name,
                "--slots", "2", "--no-calibrate", *secrets,
            )
        c = gridwise.Client(agent=agent, token=TOKEN)
        deadline = time.time() + 30
        while len([s for s in c.status()["servers"] if s["state"] == "Up"]) < 2:
            if time.time() > deadline:
                raise RuntimeError("the servers did not register within 30 s")
            time.sleep(0.05)
        yield agent
    finally:
        d.stop()


@pytest.fixture(scope="session")
def client(grid):
    return gridwise.Client(agent=grid, token=TOKEN)
