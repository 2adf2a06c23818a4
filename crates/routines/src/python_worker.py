# A gridwise Python worker: runs one service's `module:function` for the server that started
# it, one call at a time, speaking the protocol of frame.rs over stdin and a duplicate of
# stdout (the function's own prints go to stderr). Arrays arrive as numpy views of the arena
# (fd 3, shared with the server) and outputs of declared shape are written back into it.
import importlib
import json
import mmap
import os
import struct
import sys
import traceback

spec = json.loads(os.environ["GRIDWISE_WORKER_SPEC"])
desc = spec["desc"]
frames_out = os.fdopen(os.dup(1), "wb")
os.dup2(2, 1)
sys.stdout = sys.stderr
frames_in = sys.stdin.buffer


def read_exact(n):
    buf = b""
    while len(buf) < n:
        chunk = frames_in.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def read_frame():
    head = read_exact(4)
    if head is None:
        return None, None
    header = json.loads(read_exact(struct.unpack("<I", head)[0]))
    blob = read_exact(struct.unpack("<Q", read_exact(8))[0]) or b""
    return header, blob


def write_frame(header, blob=b""):
    h = json.dumps(header).encode()
    frames_out.write(struct.pack("<I", len(h)) + h + struct.pack("<Q", len(blob)) + blob)
    frames_out.flush()


try:
    import numpy as np

    module_name, _, function_name = spec["function"].partition(":")
    for p in reversed(spec.get("path", [])):
        sys.path.insert(0, p)
    function = getattr(importlib.import_module(module_name), function_name)
except Exception as e:  # the server reports it as the reason no call can run
    write_frame({"error": f"cannot load {spec['function']}: {type(e).__name__}: {e}"})
    sys.exit(0)
write_frame("ready")

DTYPES = {"f64": np.float64, "f32": np.float32, "i32": np.int32, "i64": np.int64}
arena, arena_len = None, 0


def view(place):
    a = place
    dt = np.dtype(DTYPES[a["elem"]])
    v = np.frombuffer(arena, dtype=dt, count=a["len"] // dt.itemsize, offset=a["off"])
    return v if a["vector"] else v.reshape(a["rows"], a["cols"])


def output(arg, item, value, blob):
    kind = arg["type"]
    if kind == "int":
        return {"int": int(value)}, blob
    if kind == "double":
        return {"double": float(value)}, blob
    if kind == "string":
        return {"str": str(value)}, blob
    if kind == "bytes":
        b = bytes(value)
        return {"bytes": {"off": len(blob), "len": len(b), "blob": True}}, blob + b
    place = item["array"]
    dst = view(place)
    src = np.asarray(value, dtype=dst.dtype)
    if src.shape != dst.shape and src.size == dst.size and src.ndim <= 1:
        src = src.reshape(dst.shape)
    if src.shape != dst.shape:
        raise ValueError(
            f"output `{arg['name']}` must have shape {dst.shape} ({kind}), not {src.shape}"
        )
    dst[...] = src
    return {"array": place}, blob


while True:
    req, _ = read_frame()
    if req is None:
        break
    try:
        if req["arena_len"] != arena_len:
            arena = mmap.mmap(3, req["arena_len"]) if req["arena_len"] else None
            arena_len = req["arena_len"]
        args = []
        for arg, item in zip(desc["args"], req["args"]):
            if arg["mode"] == "out":
                continue
            (tag, v), = item.items()
            if tag == "array":
                v = view(v)
            elif tag == "bytes":
                v = bytes(arena[v["off"] : v["off"] + v["len"]]) if v["len"] else b""
            args.append(v)
        result = function(*args)
        outs = [(a, i) for a, i in zip(desc["args"], req["args"]) if a["mode"] != "in"]
        if len(outs) == 1:
            result = (result,)
        elif result is None:
            result = ()
        result = tuple(result)
        if len(result) != len(outs):
            raise ValueError(f"{spec['function']} returned {len(result)} value(s); `{desc['name']}` has {len(outs)} output(s)")
        items, blob = [], b""
        for (arg, item), value in zip(outs, result):
            it, blob = output(arg, item, value, blob)
            items.append(it)
        write_frame({"ok": items}, blob)
    except Exception as e:
        tb = traceback.format_exc(limit=4).strip().splitlines()
        write_frame({"error": f"{type(e).__name__}: {e} ({tb[-2].strip() if len(tb) > 1 else ''})"})
