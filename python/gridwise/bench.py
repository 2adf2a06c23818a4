"""`python -m gridwise.bench`: the cost of a call from Python (what `gridwise bench rpc
--client python` runs). Synchronous `add` calls timed one by one, asynchronous ones kept
WINDOW in flight, and an array of ARRAY_MIB MiB sent to `echo` and back. Prints one JSON
object."""

import argparse
import json
import threading
import time

import numpy as np

from . import Client


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m gridwise.bench")
    p.add_argument("--agent", required=True)
    p.add_argument("--token")
    p.add_argument("--calls", type=int, default=5000)
    p.add_argument("--async-calls", type=int, default=50000)
    p.add_argument("--window", type=int, default=512)
    p.add_argument("--array-mib", type=int, default=64)
    a = p.parse_args(argv)
    c = Client(agent=a.agent, token=a.token)
    for i in range(1000):
        c.call("add", i)

    lat = []
    for i in range(a.calls):
        t = time.perf_counter()
        y = c.call("add", i)
        lat.append((time.perf_counter() - t) * 1e6)
        if y != i + 1:
            raise SystemExit(f"add({i}) returned {y}")
    lat.sort()

    slots = threading.BoundedSemaphore(a.window)
    finished = threading.Event()
    lock = threading.Lock()
    done = [0]
    errors = []

    def on_done(f):
        slots.release()
        if f.exception() is not None:
            errors.append(f.exception())
        with lock:
            done[0] += 1
            if done[0] == a.async_calls:
                finished.set()

    t = time.perf_counter()
    for i in range(a.async_calls):
        slots.acquire()
        c.call_async("add", i).add_done_callback(on_done)
    finished.wait()
    per_s = a.async_calls / (time.perf_counter() - t)
    if errors:
        raise SystemExit(f"{len(errors)} asynchronous calls failed: {errors[0]}")

    n = a.array_mib * 1024 * 1024 // 8
    x = np.random.default_rng(0).random(n)
    c.call("echo", x)  # warm: the server's buffers, the pages
    best = None
    for _ in range(3):
        t = time.perf_counter()
        y = c.call("echo", x)
        s = time.perf_counter() - t
        best = s if best is None else min(best, s)
    if not np.array_equal(x, y):
        raise SystemExit("echo returned other data")
    print(
        json.dumps(
            {
                "sync_p50_us": round(lat[len(lat) // 2], 1),
                "sync_p99_us": round(lat[int((len(lat) - 1) * 0.99)], 1),
                "async_calls_per_s": round(per_s),
                "array_mib": a.array_mib,
                # Bytes moved both ways over the best of three round trips.
                "array_round_trip_mb_per_s": round(2 * x.nbytes / best / 1e6, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
