//! `gridwise._gridwise`: the native half of the Python package. It owns a tokio runtime and a
//! [`GridClient`], converts Python values to gridwise values as the service description says
//! (arrays through the buffer protocol: one copy of the bytes, never per element), and raises
//! exceptions named after the GFD.52 codes. The Python half (`gridwise/__init__.py`) adds
//! argument inference, futures, asyncio and the graph recorder.

use gridwise_client::{
    ClientConfig, FunctionHandle, GraphArg, GridClient, GrpcError, SessionId, show,
};
use gridwise_predict::EtcSpread;
use gridwise_proto::{ArgType, ElemType, ErrorCode, ServiceDesc, Value};
use numpy::{
    Element, PyArray1, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods,
};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use std::collections::HashMap;
use std::sync::Mutex;

create_exception!(
    _gridwise,
    GridRPCError,
    PyException,
    "A GridRPC call failed."
);
create_exception!(_gridwise, NotInitialized, GridRPCError);
create_exception!(_gridwise, ConfigfileNotFound, GridRPCError);
create_exception!(_gridwise, ConfigfileError, GridRPCError);
create_exception!(_gridwise, ServerNotFound, GridRPCError);
create_exception!(_gridwise, FunctionNotFound, GridRPCError);
create_exception!(_gridwise, InvalidFunctionHandle, GridRPCError);
create_exception!(_gridwise, InvalidSessionId, GridRPCError);
create_exception!(_gridwise, RpcRefused, GridRPCError);
create_exception!(_gridwise, CommunicationFailed, GridRPCError);
create_exception!(_gridwise, SessionFailed, GridRPCError);
create_exception!(_gridwise, NotCompleted, GridRPCError);
create_exception!(_gridwise, NoneCompleted, GridRPCError);
create_exception!(_gridwise, OtherError, GridRPCError);
create_exception!(_gridwise, AlreadyInitialized, GridRPCError);

/// The Python exception for a gridwise error: its class names the GFD.52 code.
fn to_py(e: GrpcError) -> PyErr {
    let m = e.message;
    match e.code {
        ErrorCode::NotInitialized => NotInitialized::new_err(m),
        ErrorCode::ConfigfileNotFound => ConfigfileNotFound::new_err(m),
        ErrorCode::ConfigfileError => ConfigfileError::new_err(m),
        ErrorCode::ServerNotFound => ServerNotFound::new_err(m),
        ErrorCode::FunctionNotFound => FunctionNotFound::new_err(m),
        ErrorCode::InvalidFunctionHandle => InvalidFunctionHandle::new_err(m),
        ErrorCode::InvalidSessionId => InvalidSessionId::new_err(m),
        ErrorCode::RpcRefused => RpcRefused::new_err(m),
        ErrorCode::CommunicationFailed => CommunicationFailed::new_err(m),
        ErrorCode::SessionFailed => SessionFailed::new_err(m),
        ErrorCode::NotCompleted => NotCompleted::new_err(m),
        ErrorCode::NoneCompleted => NoneCompleted::new_err(m),
        ErrorCode::AlreadyInitialized => AlreadyInitialized::new_err(m),
        _ => OtherError::new_err(m),
    }
}

fn numpy_dtype(e: ElemType) -> &'static str {
    match e {
        ElemType::F64 => "float64",
        ElemType::F32 => "float32",
        ElemType::I32 => "int32",
        ElemType::I64 => "int64",
    }
}

/// The bytes of a C-contiguous numpy array of `T` and its shape: one copy of the bytes, as
/// they travel (little-endian hosts only, which is every host gridwise runs on).
fn buffer_of<T: Element>(
    obj: &Bound<'_, PyAny>,
    what: &str,
    elem: ElemType,
) -> PyResult<(Vec<u8>, Vec<usize>)> {
    let a: PyReadonlyArrayDyn<'_, T> = obj.extract().map_err(|_| {
        let got = obj
            .getattr("dtype")
            .map(|d| d.to_string())
            .unwrap_or_else(|_| obj.get_type().to_string());
        PyTypeError::new_err(format!(
            "{what} must be a numpy array of {} ({}), got {got}",
            numpy_dtype(elem),
            elem
        ))
    })?;
    let slice = a.as_slice().map_err(|_| {
        PyValueError::new_err(format!(
            "{what} is not C-contiguous: pass numpy.ascontiguousarray(x)"
        ))
    })?;
    let len = std::mem::size_of_val(slice);
    let mut data = gridwise_proto::value::array_bytes(len)
        .map_err(|_| PyValueError::new_err(format!("{what}: cannot allocate {len} bytes")))?;
    // SAFETY: `slice` is `len` bytes of plain numbers, readable as bytes.
    data.extend_from_slice(unsafe { std::slice::from_raw_parts(slice.as_ptr().cast::<u8>(), len) });
    Ok((data, a.shape().to_vec()))
}

/// A numpy array of `T` holding `data` (little-endian `T`s) with `shape`: one copy.
fn array_of<'py, T: Element + Copy>(
    py: Python<'py>,
    data: &[u8],
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    let n = data.len() / std::mem::size_of::<T>();
    let flat = PyArray1::<T>::zeros(py, n, false);
    // SAFETY: the array was just made here, is contiguous, and nothing else refers to it.
    let dst = unsafe { flat.as_slice_mut() }
        .map_err(|_| OtherError::new_err("a fresh numpy array is not contiguous"))?;
    // SAFETY: `dst` is n·size_of::<T>() ≤ data.len() bytes of plain numbers.
    unsafe {
        std::ptr::copy_nonoverlapping(
            data.as_ptr(),
            dst.as_mut_ptr().cast::<u8>(),
            n * std::mem::size_of::<T>(),
        )
    };
    let shaped: Bound<'py, PyArrayDyn<T>> = flat.reshape(shape)?;
    Ok(shaped.into_any())
}

/// One argument from Python, as the description's type says.
fn value_of(
    obj: &Bound<'_, PyAny>,
    desc: &ServiceDesc,
    arg: &str,
    ty: &ArgType,
) -> PyResult<Value> {
    let what = format!("`{}` argument `{arg}`", desc.name);
    let wrong = |t: &str| PyTypeError::new_err(format!("{what} must be {t}"));
    Ok(match ty {
        ArgType::Int => Value::Int(obj.extract::<i64>().map_err(|_| wrong("an int"))?),
        ArgType::Double => Value::Double(obj.extract::<f64>().map_err(|_| wrong("a float"))?),
        ArgType::Str => Value::Str(obj.extract::<String>().map_err(|_| wrong("a str"))?),
        ArgType::Bytes => Value::Bytes(obj.extract::<Vec<u8>>().map_err(|_| wrong("bytes"))?),
        ArgType::Vector { elem, .. } | ArgType::Matrix { elem, .. } => {
            let (data, shape) = match elem {
                ElemType::F64 => buffer_of::<f64>(obj, &what, *elem)?,
                ElemType::F32 => buffer_of::<f32>(obj, &what, *elem)?,
                ElemType::I32 => buffer_of::<i32>(obj, &what, *elem)?,
                ElemType::I64 => buffer_of::<i64>(obj, &what, *elem)?,
            };
            let matrix = matches!(ty, ArgType::Matrix { .. });
            let (rows, cols) = match (matrix, shape.as_slice()) {
                (false, [n]) => (*n as u64, 1),
                (true, [r, c]) => (*r as u64, *c as u64),
                _ => {
                    return Err(PyValueError::new_err(format!(
                        "{what} must have {} dimension(s), not {} (shape {shape:?})",
                        if matrix { 2 } else { 1 },
                        shape.len()
                    )));
                }
            };
            let a = gridwise_proto::Array {
                elem: *elem,
                rows,
                cols,
                data,
            };
            if matrix {
                Value::Matrix(a)
            } else {
                Value::Vector(a)
            }
        }
    })
}

/// The inputs of a call from Python arguments (IN and INOUT, in order).
fn inputs_of(desc: &ServiceDesc, args: &Bound<'_, PyTuple>) -> PyResult<Vec<Value>> {
    let ins: Vec<_> = desc.inputs().collect();
    if ins.len() != args.len() {
        let names: Vec<&str> = ins.iter().map(|a| a.name.as_str()).collect();
        return Err(PyTypeError::new_err(format!(
            "`{}` takes {} input(s) ({}), {} given",
            desc.name,
            ins.len(),
            names.join(", "),
            args.len()
        )));
    }
    ins.iter()
        .zip(args.iter())
        .map(|(a, obj)| value_of(&obj, desc, &a.name, &a.ty))
        .collect()
}

/// A gridwise value as a Python object; arrays become numpy arrays over one copy of the bytes.
fn py_of<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Int(i) => i.into_pyobject(py)?.into_any(),
        Value::Double(d) => d.into_pyobject(py)?.into_any(),
        Value::Str(s) => s.into_pyobject(py)?.into_any(),
        Value::Bytes(b) => PyBytes::new(py, b).into_any(),
        Value::Vector(a) | Value::Matrix(a) => {
            if !a.is_well_formed() {
                return Err(OtherError::new_err(format!(
                    "a malformed array came back: {a:?}"
                )));
            }
            let shape: Vec<usize> = if matches!(v, Value::Matrix(_)) {
                vec![a.rows as usize, a.cols as usize]
            } else {
                vec![a.rows as usize]
            };
            match a.elem {
                ElemType::F64 => array_of::<f64>(py, &a.data, &shape)?,
                ElemType::F32 => array_of::<f32>(py, &a.data, &shape)?,
                ElemType::I32 => array_of::<i32>(py, &a.data, &shape)?,
                ElemType::I64 => array_of::<i64>(py, &a.data, &shape)?,
            }
        }
        Value::Ref(r) => {
            return Err(OtherError::new_err(format!(
                "a value kept on {} came back where a value was expected",
                r.holder
            )));
        }
    })
}

/// The bytes under a numpy array made from a received array. When numpy lets them go they are
/// kept for the next array of that size ([`gridwise_proto::value::recycle`]): a loop sending
/// large arrays then fills pages it already has, instead of faulting in fresh ones each call.
#[pyclass(frozen)]
struct ArrayBytes {
    data: Vec<u8>,
}

impl Drop for ArrayBytes {
    fn drop(&mut self) {
        gridwise_proto::value::recycle(std::mem::take(&mut self.data));
    }
}

/// Like [`py_of`], taking the value: an array's buffer becomes the numpy array's own, with no
/// copy (a `uint8` array over the bytes, viewed as the element type and shaped).
fn py_of_owned<'py>(py: Python<'py>, v: Value) -> PyResult<Bound<'py, PyAny>> {
    let (a, matrix) = match v {
        Value::Vector(a) => (a, false),
        Value::Matrix(a) => (a, true),
        other => return py_of(py, &other),
    };
    if !a.is_well_formed() || a.data.as_ptr().align_offset(a.elem.size()) != 0 {
        let v = if matrix {
            Value::Matrix(a)
        } else {
            Value::Vector(a)
        };
        return py_of(py, &v);
    }
    let dtype = match a.elem {
        ElemType::F64 => "<f8",
        ElemType::F32 => "<f4",
        ElemType::I32 => "<i4",
        ElemType::I64 => "<i8",
    };
    let shape: Vec<usize> = if matrix {
        vec![a.rows as usize, a.cols as usize]
    } else {
        vec![a.rows as usize]
    };
    let mut data = a.data;
    let (ptr, len) = (data.as_mut_ptr(), data.len());
    let owner = Bound::new(py, ArrayBytes { data })?;
    // SAFETY: `ptr` is `len` initialised bytes of `owner`'s buffer, which stays where it is and
    // is touched by nothing else until numpy, the only holder of `owner`, lets it go.
    let bytes = unsafe {
        let view = numpy::ndarray::ArrayView1::from_shape_ptr(len, ptr.cast_const());
        PyArray1::<u8>::borrow_from_array(&view, owner.into_any())
    };
    let typed = bytes.call_method1("view", (dtype,))?;
    typed.call_method1("reshape", (shape,))
}

fn outputs_py_owned<'py>(py: Python<'py>, outs: Vec<Value>) -> PyResult<Bound<'py, PyList>> {
    let items = outs
        .into_iter()
        .map(|v| py_of_owned(py, v))
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

fn outputs_py<'py>(py: Python<'py>, outs: &[Value]) -> PyResult<Bound<'py, PyList>> {
    let items = outs
        .iter()
        .map(|v| py_of(py, v))
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

/// The client: one tokio runtime, one connection to the agent, handles made once per service
/// and server.
#[pyclass(frozen)]
struct Native {
    rt: tokio::runtime::Runtime,
    client: GridClient,
    calls: gridwise_client::blocking::SyncCalls,
    handles: Mutex<HashMap<(String, Option<String>), FunctionHandle>>,
}

impl Native {
    fn handle(
        &self,
        py: Python<'_>,
        service: &str,
        server: Option<&str>,
    ) -> PyResult<FunctionHandle> {
        let key = (service.to_string(), server.map(str::to_string));
        if let Some(h) = self
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(h.clone());
        }
        let h = py
            .detach(|| {
                self.rt.block_on(async {
                    match server {
                        Some(s) => self.client.function_handle_init(service, s).await,
                        None => self.client.function_handle_default(service).await,
                    }
                })
            })
            .map_err(to_py)?;
        self.handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, h.clone());
        Ok(h)
    }
}

fn timing_dict<'py>(
    py: Python<'py>,
    r: &gridwise_client::CallResult,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("server", &r.server)?;
    d.set_item("queue_wait_s", r.timing.queue_wait_s)?;
    d.set_item("input_transfer_s", r.timing.input_transfer_s)?;
    d.set_item("kernel_s", r.timing.kernel_s)?;
    d.set_item("server_s", r.timing.server_s)?;
    d.set_item("round_trip_s", r.round_trip_s)?;
    d.set_item("rank_s", r.rank_s)?;
    if let Some(e) = &r.predicted {
        d.set_item("predicted_s", e.total_s())?;
        let (lo, hi) = e.interval90_s();
        d.set_item("interval90_s", (lo, hi))?;
    }
    Ok(d)
}

#[pymethods]
impl Native {
    /// Connects to the agent: from a configuration file, or an address and token.
    #[new]
    #[pyo3(signature = (agent=None, token=None, config=None))]
    fn new(agent: Option<String>, token: Option<String>, config: Option<String>) -> PyResult<Self> {
        // As the command line: a file, else an address, else GRIDWISE_AGENT; the token from
        // GRIDWISE_TOKEN unless given (a file keeps its own).
        let mut cfg = match (&config, &agent, ClientConfig::from_env()) {
            (Some(path), _, _) => ClientConfig::from_file(path).map_err(to_py)?,
            (None, Some(a), _) => {
                let mut c = ClientConfig::with_agent(a.clone());
                c.token = ClientConfig::token_from_env();
                c
            }
            (None, None, Some(env)) => env,
            (None, None, None) => {
                return Err(ConfigfileNotFound::new_err(
                    "give the agent's address (agent=\"host:port\", or GRIDWISE_AGENT in the environment) or a configuration file (config=...)",
                ));
            }
        };
        if config.is_some()
            && let Some(a) = agent
        {
            cfg.agent = a;
        }
        if token.is_some() {
            cfg.token = token;
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("gridwise-python")
            .enable_all()
            .build()
            .map_err(|e| OtherError::new_err(format!("cannot start the client runtime: {e}")))?;
        let client = rt.block_on(GridClient::connect(cfg)).map_err(to_py)?;
        Ok(Native {
            rt,
            client,
            calls: Default::default(),
            handles: Mutex::new(HashMap::new()),
        })
    }

    /// The description of `service` as JSON.
    fn describe(&self, py: Python<'_>, service: &str) -> PyResult<String> {
        let h = self.handle(py, service, None)?;
        serde_json::to_string(&*h.desc).map_err(|e| OtherError::new_err(e.to_string()))
    }

    /// Every service the grid offers, with its description, as JSON.
    fn services(&self, py: Python<'_>) -> PyResult<String> {
        let s = py
            .detach(|| self.rt.block_on(self.client.list_services()))
            .map_err(to_py)?;
        serde_json::to_string(&s).map_err(|e| OtherError::new_err(e.to_string()))
    }

    /// The grid as `gridwise status` prints it: a table, or (`json`) its JSON.
    fn status_text(&self, py: Python<'_>, json: bool) -> PyResult<String> {
        let s = py
            .detach(|| self.rt.block_on(self.client.status()))
            .map_err(to_py)?;
        Ok(if json {
            show::status_json(&s).to_string()
        } else {
            show::status_table(&s)
        })
    }

    /// The services as `gridwise services` prints them (`describe`: `--describe`).
    fn services_text(&self, py: Python<'_>, describe: bool) -> PyResult<String> {
        let list = py
            .detach(|| self.rt.block_on(self.client.list_services()))
            .map_err(to_py)?;
        if !describe {
            return Ok(show::services_table(&list));
        }
        let st = py
            .detach(|| self.rt.block_on(self.client.status()))
            .map_err(to_py)?;
        Ok(show::services_described(&list, &st))
    }

    /// The agent in use: of several given, the one that last answered.
    fn agent(&self) -> String {
        self.client.agent_addr()
    }

    /// The agent's view of the grid, as JSON.
    fn status(&self, py: Python<'_>) -> PyResult<String> {
        let s = py
            .detach(|| self.rt.block_on(self.client.status()))
            .map_err(to_py)?;
        serde_json::to_string(&s).map_err(|e| OtherError::new_err(e.to_string()))
    }

    /// Calls `service` (on `server`, if given) and waits: (outputs, details).
    #[pyo3(signature = (service, server, args))]
    fn call<'py>(
        &self,
        py: Python<'py>,
        service: &str,
        server: Option<&str>,
        args: &Bound<'py, PyTuple>,
    ) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyDict>)> {
        let h = self.handle(py, service, server)?;
        let inputs = inputs_of(&h.desc, args)?;
        // One task on the client's runtime: a call's two round trips then cross threads once
        // each way, not once per round trip.
        let client = self.client.clone();
        let (r, inputs) = py
            .detach(|| {
                self.calls.run(self.rt.handle(), async move {
                    let r = client.call_borrowed(&h, &inputs).await;
                    (r, inputs)
                })
            })
            .map_err(|e| {
                to_py(GrpcError::communication(format!(
                    "the call's task did not finish: {e}"
                )))
            })?;
        // Their buffers serve the next call's copies (see `ArrayBytes`).
        inputs.into_iter().for_each(Value::recycle);
        let r = r.map_err(to_py)?;
        let timing = timing_dict(py, &r)?;
        Ok((outputs_py_owned(py, r.outputs)?, timing))
    }

    /// Starts a call; `done(outputs, details)` or `failed(exception)` is called from the
    /// client's thread when it ends. Returns the session id (for `cancel`).
    fn submit(
        &self,
        py: Python<'_>,
        service: &str,
        server: Option<&str>,
        args: &Bound<'_, PyTuple>,
        done: Py<PyAny>,
        failed: Py<PyAny>,
    ) -> PyResult<u64> {
        let h = self.handle(py, service, server)?;
        let inputs = inputs_of(&h.desc, args)?;
        let id = self.client.call_async(&h, inputs).map_err(to_py)?;
        let client = self.client.clone();
        self.rt.spawn(async move {
            let r = client.wait(id).await;
            Python::attach(|py| {
                let outcome = match r {
                    Ok(r) => outputs_py(py, &r.outputs)
                        .and_then(|o| Ok((o, timing_dict(py, &r)?)))
                        .and_then(|args| done.call1(py, args)),
                    Err(e) => failed.call1(py, (to_py(e).into_value(py),)),
                };
                if let Err(e) = outcome {
                    // The callbacks only settle a future; should one fail, say so.
                    e.print(py);
                }
            });
        });
        Ok(id.0)
    }

    /// Cancels a running call: on its server, or at the agent while it is being ranked.
    fn cancel(&self, py: Python<'_>, session: u64) -> PyResult<()> {
        let id = SessionId(session);
        match py.detach(|| self.rt.block_on(self.client.cancel(id))) {
            // Already waited for: it finished before the cancel arrived.
            Err(e) if e.code == ErrorCode::InvalidSessionId => Ok(()),
            r => r.map_err(to_py),
        }
    }

    /// Runs a divisible job: `make_inputs(first, units)` gives the inputs (in order) of the part
    /// covering units [first, first + units). Returns (parts, details); each part a dict with
    /// its server, first, units, predicted_s, actual_s and outputs.
    #[pyo3(signature = (service, units, unit_param, make_inputs, sizes=None, policy=None, servers=None, all=false, iterations=1))]
    #[allow(clippy::too_many_arguments)]
    fn divide<'py>(
        &self,
        py: Python<'py>,
        service: &str,
        units: u64,
        unit_param: &str,
        make_inputs: Py<PyAny>,
        sizes: Option<Vec<(String, i64)>>,
        policy: Option<String>,
        servers: Option<u32>,
        all: bool,
        iterations: usize,
    ) -> PyResult<Bound<'py, PyList>> {
        let h = self.handle(py, service, None)?;
        let spec = gridwise_client::DivideSpec {
            unit_param: unit_param.to_string(),
            sizes: sizes.unwrap_or_default(),
            policy,
            servers,
            all,
            ..Default::default()
        };
        // The inputs come from Python: each part's are made with the interpreter held, and an
        // error there ends the job with it.
        let failure: Mutex<Option<PyErr>> = Mutex::new(None);
        let inputs = |first: u64, n: u64| -> Vec<Value> {
            Python::attach(|py| {
                let made = make_inputs
                    .call1(py, (first, n))
                    .and_then(|o| o.into_bound(py).cast_into::<PyTuple>().map_err(PyErr::from))
                    .and_then(|t| inputs_of(&h.desc, &t));
                match made {
                    Ok(v) => v,
                    Err(e) => {
                        failure
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get_or_insert(e);
                        Vec::new()
                    }
                }
            })
        };
        let runs = py.detach(|| {
            self.rt.block_on(
                self.client
                    .divide_iter(&h, units, &spec, iterations.max(1), &inputs),
            )
        });
        if let Some(e) = failure.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(e);
        }
        let runs = runs.map_err(to_py)?;
        let out = PyList::empty(py);
        for r in &runs {
            let parts = PyList::empty(py);
            for p in &r.parts {
                let d = PyDict::new(py);
                d.set_item("server", &p.server)?;
                d.set_item("first", p.first)?;
                d.set_item("units", p.units)?;
                d.set_item("predicted_s", p.predicted_s)?;
                d.set_item("actual_s", p.actual_s)?;
                d.set_item("outputs", outputs_py(py, &p.result.outputs)?)?;
                parts.append(d)?;
            }
            let d = PyDict::new(py);
            d.set_item("parts", parts)?;
            d.set_item("makespan_s", r.makespan_s)?;
            d.set_item("predicted_s", r.plan.makespan_s)?;
            d.set_item("policy", &r.plan.policy)?;
            out.append(d)?;
        }
        Ok(out)
    }

    /// Runs a graph: `calls` is a list of (service, args) where an argument may be
    /// (call index, output index) wrapped in `output_type`; `fetch` lists the calls whose
    /// outputs come back (empty: those no other call uses). Returns (outputs per call, None
    /// where not fetched; details).
    #[pyo3(signature = (calls, fetch, output_type, policy=None))]
    fn run_graph<'py>(
        &self,
        py: Python<'py>,
        calls: &Bound<'py, PyList>,
        fetch: Vec<usize>,
        output_type: &Bound<'py, PyAny>,
        policy: Option<String>,
    ) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyDict>)> {
        let mut g = self.client.graph();
        if let Some(p) = &policy {
            g.policy(p);
        }
        let mut refs = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            let (service, args): (String, Bound<'py, PyTuple>) = call.extract()?;
            let h = self.handle(py, &service, None)?;
            let ins: Vec<_> = h.desc.inputs().collect();
            if ins.len() != args.len() {
                return Err(PyTypeError::new_err(format!(
                    "graph call {i}: `{service}` takes {} input(s), {} given",
                    ins.len(),
                    args.len()
                )));
            }
            let mut gargs = Vec::new();
            for (a, obj) in ins.iter().zip(args.iter()) {
                if obj.is_instance(output_type)? {
                    let call: usize = obj.getattr("call")?.extract()?;
                    let output: usize = obj.getattr("index")?.extract()?;
                    let c = *refs.get(call).ok_or_else(|| {
                        PyValueError::new_err(format!(
                            "graph call {i} uses an output of call {call}, which is not recorded before it"
                        ))
                    })?;
                    gargs.push(GraphArg::Output { call: c, output });
                } else {
                    gargs.push(GraphArg::Value(value_of(&obj, &h.desc, &a.name, &a.ty)?));
                }
            }
            refs.push(g.call(&service, gargs));
        }
        for f in fetch {
            let c = *refs
                .get(f)
                .ok_or_else(|| PyValueError::new_err(format!("no call {f} to fetch")))?;
            g.fetch(c);
        }
        let run = py.detach(|| self.rt.block_on(g.run())).map_err(to_py)?;
        let outs = PyList::empty(py);
        for c in &refs {
            match run.outputs(*c) {
                Some(o) => outs.append(outputs_py(py, o)?)?,
                None => outs.append(py.None())?,
            }
        }
        let d = PyDict::new(py);
        d.set_item("makespan_s", run.makespan_s)?;
        d.set_item("predicted_makespan_s", run.plan.makespan_s)?;
        let servers: Vec<&str> = run.calls.iter().map(|c| c.server.as_str()).collect();
        d.set_item("servers", servers)?;
        Ok((outs, d))
    }
}

#[pymodule]
fn _gridwise(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Native>()?;
    m.add("GridRPCError", py.get_type::<GridRPCError>())?;
    m.add("NotInitialized", py.get_type::<NotInitialized>())?;
    m.add("ConfigfileNotFound", py.get_type::<ConfigfileNotFound>())?;
    m.add("ConfigfileError", py.get_type::<ConfigfileError>())?;
    m.add("ServerNotFound", py.get_type::<ServerNotFound>())?;
    m.add("FunctionNotFound", py.get_type::<FunctionNotFound>())?;
    m.add(
        "InvalidFunctionHandle",
        py.get_type::<InvalidFunctionHandle>(),
    )?;
    m.add("InvalidSessionId", py.get_type::<InvalidSessionId>())?;
    m.add("RpcRefused", py.get_type::<RpcRefused>())?;
    m.add("CommunicationFailed", py.get_type::<CommunicationFailed>())?;
    m.add("SessionFailed", py.get_type::<SessionFailed>())?;
    m.add("NotCompleted", py.get_type::<NotCompleted>())?;
    m.add("NoneCompleted", py.get_type::<NoneCompleted>())?;
    m.add("OtherError", py.get_type::<OtherError>())?;
    m.add("AlreadyInitialized", py.get_type::<AlreadyInitialized>())?;
    Ok(())
}
