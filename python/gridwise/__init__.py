"""gridwise: call remote routines placed by the gridwise agent, with NumPy arrays in and out.

    import numpy as np, gridwise
    client = gridwise.Client(agent="127.0.0.1:7000")          # or Client(config="client.toml")
    C = client.call("dgemm", A, B)                            # m, n, k come from the shapes
    fut = client.call_async("dgemm", A, B)                    # a concurrent.futures.Future
    C = await client.acall("dgemm", A, B)                     # from asyncio
    g = client.graph(); c = g.call("dgemm", A, B); g.call("dgemm", c.output(0), B); g.run()

Errors are exceptions named after the GridRPC (GFD.52) codes, all subclasses of
`GridRPCError`: `FunctionNotFound`, `SessionFailed`, `CommunicationFailed`, ...
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from ._gridwise import (
    AlreadyInitialized,
    CommunicationFailed,
    ConfigfileError,
    ConfigfileNotFound,
    FunctionNotFound,
    GridRPCError,
    InvalidFunctionHandle,
    InvalidSessionId,
    Native,
    NoneCompleted,
    NotCompleted,
    NotInitialized,
    OtherError,
    RpcRefused,
    ServerNotFound,
    SessionFailed,
)

__all__ = [
    "Client",
    "CallFuture",
    "Graph",
    "GraphCall",
    "GraphOutput",
    "GraphResult",
    "Service",
    "as_completed",
    "GridRPCError",
    "NotInitialized",
    "ConfigfileNotFound",
    "ConfigfileError",
    "ServerNotFound",
    "FunctionNotFound",
    "InvalidFunctionHandle",
    "InvalidSessionId",
    "RpcRefused",
    "CommunicationFailed",
    "SessionFailed",
    "NotCompleted",
    "NoneCompleted",
    "OtherError",
    "AlreadyInitialized",
]

# The GFD.52 number of each exception, for programs that log codes.
for _cls, _code in [
    (NotInitialized, 1),
    (ConfigfileNotFound, 2),
    (ConfigfileError, 3),
    (ServerNotFound, 4),
    (FunctionNotFound, 5),
    (InvalidFunctionHandle, 6),
    (InvalidSessionId, 7),
    (RpcRefused, 8),
    (CommunicationFailed, 9),
    (SessionFailed, 10),
    (NotCompleted, 11),
    (NoneCompleted, 12),
    (OtherError, 13),
    (AlreadyInitialized, 15),
]:
    _cls.code = _code
GridRPCError.code = 13

as_completed = concurrent.futures.as_completed

_DTYPES = {"f64": np.float64, "f32": np.float32, "i32": np.int32, "i64": np.int64}


@dataclass(frozen=True)
class Argument:
    """One argument of a service: its name, mode (in, out, inout), IDL type and meaning."""

    name: str
    mode: str
    type: str
    doc: str

    @property
    def elem(self) -> Optional[str]:
        """The element type of an array argument (f64, f32, i32, i64), else None."""
        if "<" in self.type:
            return self.type.split("<", 1)[1].split(">", 1)[0]
        return None

    @property
    def dims(self) -> List[str]:
        """The dimensions of an array argument: numbers or names of int arguments."""
        if "[" not in self.type:
            return []
        return [d.strip() for d in self.type.split("[", 1)[1].rstrip("]").split(",")]


@dataclass(frozen=True)
class Service:
    """A service as the grid describes it."""

    name: str
    doc: str
    args: Tuple[Argument, ...]
    size_params: Tuple[str, ...]
    complexity: Optional[str]

    @classmethod
    def _from_json(cls, d: Dict[str, Any]) -> "Service":
        return cls(
            name=d["name"],
            doc=d.get("doc", ""),
            args=tuple(
                Argument(a["name"], a["mode"], a["type"], a.get("doc", "")) for a in d["args"]
            ),
            size_params=tuple(d.get("size_params", [])),
            complexity=d.get("complexity"),
        )

    @property
    def inputs(self) -> Tuple[Argument, ...]:
        return tuple(a for a in self.args if a.mode in ("in", "inout"))

    @property
    def outputs(self) -> Tuple[Argument, ...]:
        return tuple(a for a in self.args if a.mode in ("out", "inout"))

    @property
    def signature(self) -> str:
        """`dgemm(m: int, n: int, k: int, A: matrix<f64>[m,k], B: matrix<f64>[k,n]) -> C: ...`"""
        ins = ", ".join(f"{a.name}: {a.type}" for a in self.inputs)
        outs = ", ".join(f"{a.name}: {a.type}" for a in self.outputs)
        return f"{self.name}({ins}) -> {outs}"

    def __str__(self) -> str:
        return self.signature

    def _derived(self) -> Dict[str, Tuple[int, int]]:
        """Int inputs that an array input's shape gives: name -> (input position, axis)."""
        out: Dict[str, Tuple[int, int]] = {}
        for pos, a in enumerate(self.inputs):
            for axis, d in enumerate(a.dims):
                if not d.isdigit() and d not in out:
                    out[d] = (pos, axis)
        return out

    def bind(self, args: Sequence[Any]) -> Tuple[Any, ...]:
        """The full list of inputs from what the caller gave: every input in order, or the
        inputs without the int sizes that array shapes give (`dgemm(A, B)`). Arrays are
        converted to C order (Fortran-ordered ones copied once); lists become arrays of the
        declared type; an array of another dtype is refused."""
        ins = self.inputs
        derived = self._derived()
        if len(args) == len(ins):
            full = list(args)
        else:
            given = [a for a in ins if a.name not in derived]
            if len(args) != len(given):
                raise TypeError(
                    f"{self.name} takes {len(ins)} inputs ({', '.join(a.name for a in ins)}) "
                    f"or, with sizes taken from array shapes, {len(given)} "
                    f"({', '.join(a.name for a in given)}); {len(args)} given"
                )
            it = iter(args)
            full = [None if a.name in derived else next(it) for a in ins]
        for i, a in enumerate(ins):
            full[i] = _array_arg(self.name, a, full[i])
        for i, a in enumerate(ins):
            if full[i] is None:
                pos, axis = derived[a.name]
                src = full[pos]
                if not isinstance(src, np.ndarray) or src.ndim <= axis:
                    raise TypeError(
                        f"{self.name}: `{a.name}` is the size of `{ins[pos].name}`, which is "
                        "not an array here: pass every input"
                    )
                full[i] = int(src.shape[axis])
        return tuple(full)


def _array_arg(service: str, a: Argument, v: Any) -> Any:
    if a.elem is None or v is None or isinstance(v, GraphOutput):
        return v
    want = _DTYPES[a.elem]
    if isinstance(v, np.ndarray):
        if v.dtype != want:
            raise TypeError(
                f"{service} argument `{a.name}` must be {np.dtype(want).name} ({a.type}), "
                f"got {v.dtype.name}: convert it with .astype(numpy.{np.dtype(want).name})"
            )
        return v if v.flags.c_contiguous else np.ascontiguousarray(v)
    return np.ascontiguousarray(np.asarray(v, dtype=want))


def _unpack(outs: List[Any]) -> Any:
    if len(outs) == 1:
        return outs[0]
    return tuple(outs) if outs else None


class CallFuture(concurrent.futures.Future):
    """The result of an asynchronous call: a `concurrent.futures.Future` whose `cancel()`
    stops the call on its server. `details` holds the server and timings once done."""

    def __init__(self, client: "Client") -> None:
        super().__init__()
        self._client = client
        self.session_id: Optional[int] = None
        self.details: Optional[Dict[str, Any]] = None
        self._cancelling = False

    def cancel(self) -> bool:
        if self.done():
            return False
        # The call's own failure ("cancelled") is not its outcome: the cancellation is.
        self._cancelling = True
        if self.session_id is not None:
            self._client._native.cancel(self.session_id)
        return super().cancel()


class Client:
    """A connection to a gridwise agent. Give `agent` ("host:port", or several comma-separated
    when agents share a store) and `token`, or `config`, the path of a client configuration
    file (TOML, as the C API and the CLI read)."""

    def __init__(
        self,
        agent: Optional[str] = None,
        token: Optional[str] = None,
        config: Optional[str] = None,
    ) -> None:
        self._native = Native(agent, token, config)
        self._services: Dict[str, Service] = {}
        self._lock = threading.Lock()

    def service(self, name: str) -> Service:
        """The description of `name` (fetched once)."""
        with self._lock:
            s = self._services.get(name)
        if s is None:
            s = Service._from_json(json.loads(self._native.describe(name)))
            with self._lock:
                self._services[name] = s
        return s

    def services(self) -> List[Service]:
        """Every service some server offers."""
        return [Service._from_json(s["desc"]) for s in json.loads(self._native.services())]

    @property
    def agent(self) -> str:
        """The agent in use ("host:port"). Given several (`agent="a:7000,b:7000"`), the client
        starts at a random one and moves to the next that answers when its agent fails."""
        return self._native.agent()

    def status(self) -> Dict[str, Any]:
        """The agent's view of the grid: servers, their state, load and queues."""
        return json.loads(self._native.status())

    def call(self, service: str, *args: Any, server: Optional[str] = None) -> Any:
        """Calls `service` and returns its output (a tuple when it has several). `server`
        binds the call to one server (its name or host:port)."""
        return self.call_detailed(service, *args, server=server)[0]

    def call_detailed(
        self, service: str, *args: Any, server: Optional[str] = None
    ) -> Tuple[Any, Dict[str, Any]]:
        """Like `call`, with where the call ran and where its time went."""
        full = self.service(service).bind(args)
        outs, details = self._native.call(service, server, full)
        return _unpack(outs), details

    def call_async(self, service: str, *args: Any, server: Optional[str] = None) -> CallFuture:
        """Starts a call; returns a future (usable from threads, and from asyncio through
        `acall` or `asyncio.wrap_future`)."""
        full = self.service(service).bind(args)
        fut = CallFuture(self)

        def done(outs: List[Any], details: Dict[str, Any]) -> None:
            fut.details = details
            if not fut.done():
                fut.set_result(_unpack(outs))

        def failed(e: BaseException) -> None:
            if fut._cancelling and isinstance(e, SessionFailed):
                return
            if not fut.done():
                fut.set_exception(e)

        fut.session_id = self._native.submit(service, server, full, done, failed)
        return fut

    async def acall(self, service: str, *args: Any, server: Optional[str] = None) -> Any:
        """`await client.acall(...)`: the call, from asyncio."""
        return await asyncio.wrap_future(self.call_async(service, *args, server=server))

    @staticmethod
    def wait_any(futures: Iterable[concurrent.futures.Future]) -> concurrent.futures.Future:
        """The first of `futures` to finish (GridRPC's wait_any)."""
        done, _ = concurrent.futures.wait(
            list(futures), return_when=concurrent.futures.FIRST_COMPLETED
        )
        return next(iter(done))

    @staticmethod
    def wait_all(futures: Iterable[concurrent.futures.Future]) -> List[Any]:
        """Every result, in the order given; the first failure is raised."""
        return [f.result() for f in futures]

    def cancel(self, future: CallFuture) -> bool:
        """Stops a call (GridRPC's cancel); False if it had already finished."""
        return future.cancel()

    def divide(
        self,
        service: str,
        units: int,
        make_inputs: Callable[[int, int], Sequence[Any]],
        unit: str,
        sizes: Optional[Dict[str, int]] = None,
        policy: Optional[str] = None,
        servers: Optional[int] = None,
        all: bool = False,
        iterations: int = 1,
    ) -> List[Dict[str, Any]]:
        """Runs `units` of `service` cut into parts by the agent (which servers, how many units
        each). `make_inputs(first, n)` returns the inputs of the part covering units
        [first, first + n) (every input, sizes included). `unit` is the size parameter that
        counts units; `sizes` the others. Returns one dict per iteration: `parts` (in unit
        order: server, first, units, predicted_s, actual_s, outputs), `makespan_s`,
        `predicted_s`, `policy`."""
        desc = self.service(service)

        def made(first: int, n: int) -> Tuple[Any, ...]:
            return tuple(
                _array_arg(service, a, v) for a, v in zip(desc.inputs, make_inputs(first, n))
            )

        return self._native.divide(
            service,
            units,
            unit,
            made,
            list((sizes or {}).items()),
            policy,
            servers,
            all,
            iterations,
        )

    def graph(self) -> "Graph":
        """A new task graph: record calls, then `run()` maps and runs them as a whole."""
        return Graph(self)


@dataclass(frozen=True)
class GraphOutput:
    """Output `index` of graph call `call`, as another call's input."""

    call: int
    index: int


class GraphCall:
    """A call recorded in a graph."""

    def __init__(self, graph: "Graph", index: int) -> None:
        self._graph = graph
        self.index = index

    def output(self, k: int = 0) -> GraphOutput:
        """Its `k`-th output (over the service's out and inout arguments), for a later call."""
        return GraphOutput(self.index, k)


class GraphResult:
    """A finished graph: the outputs of fetched calls, the makespan and where calls ran."""

    def __init__(self, outputs: List[Optional[List[Any]]], details: Dict[str, Any]) -> None:
        self._outputs = outputs
        self.makespan_s: float = details["makespan_s"]
        self.predicted_makespan_s: float = details["predicted_makespan_s"]
        self.servers: List[str] = details["servers"]

    def outputs(self, call: GraphCall) -> Any:
        """The output(s) of `call`; None for calls whose outputs stayed on the servers."""
        o = self._outputs[call.index]
        return None if o is None else _unpack(o)


class Graph:
    """Calls recorded to be mapped and run as a whole: intermediate values move from server
    to server and only the outputs asked for (by default, of the calls nothing else uses)
    come back."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._calls: List[Tuple[str, Tuple[Any, ...]]] = []
        self._fetch: List[int] = []
        self._policy: Optional[str] = None

    def call(self, service: str, *args: Any) -> GraphCall:
        """Records a call; arguments may be other calls' `.output(k)`."""
        full = self._client.service(service).bind(args)
        self._calls.append((service, full))
        return GraphCall(self, len(self._calls) - 1)

    def fetch(self, call: GraphCall) -> None:
        """Brings `call`'s outputs back when the graph has run."""
        if call.index not in self._fetch:
            self._fetch.append(call.index)

    def policy(self, name: str) -> None:
        """Maps with this policy (best-of, heft, peft, min-min, mct, sufferage, lp, ...)."""
        self._policy = name

    def run(self) -> GraphResult:
        outs, details = self._client._native.run_graph(
            self._calls, self._fetch, GraphOutput, self._policy
        )
        return GraphResult(outs, details)
