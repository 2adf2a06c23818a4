//! Task-graph messages: a client asks the agent to map a whole group of calls at once
//! (SmartGridSolve's `grpc_map`), and gets back where each call runs, in which order, and the
//! predicted timeline.

use crate::graph_policy::GraphPolicy;
use crate::ids::{DataHandle, ServerId, Ticket};
use crate::messages::CallProfile;
use crate::service::{ArgDesc, ArgType, Dim, ServiceDesc};
use crate::value::{RemoteRef, Value};
use serde::{Deserialize, Serialize};

/// One call of a graph, as the agent needs it for mapping: no data, only sizes and bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GraphCall {
    /// A name for messages and charts (unique in the graph).
    pub name: String,
    /// Service and sizes; `in_bytes` counts only what the client sends, `remote_in` is empty
    /// (data from other calls of the graph is on the edges).
    pub profile: CallProfile,
    /// Whether the client brings the call's outputs back when the graph has run (the sinks,
    /// unless the client names others): the agent counts their trip over the client's link
    /// in the predicted makespan.
    #[serde(default)]
    pub fetched: bool,
}

/// A data dependency: call `to` needs `bytes` of call `from`'s outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphEdge {
    /// Producer (index into [`GraphRequest::calls`]).
    pub from: u32,
    /// Consumer, indexed the same way. The agent refuses an edge from a call to itself, to a
    /// missing call, or closing a cycle.
    pub to: u32,
    /// Bytes moved from producer to consumer; the agent adds up repeated edges between one pair.
    pub bytes: u64,
}

/// A graph to map.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GraphRequest {
    /// The calls, in submission order.
    pub calls: Vec<GraphCall>,
    /// Empty for a bag of independent calls, which the agent maps with `lp` by default.
    pub edges: Vec<GraphEdge>,
    /// The mapping policy; `None` for the agent's default for the graph's shape.
    pub policy: Option<GraphPolicy>,
    /// Whether to record the calls as assignments on their servers' queues (true for a run,
    /// with one ticket per call; false for a prediction).
    pub reserve: bool,
    /// Map by each call's time this many standard deviations above its mean (seed 000's
    /// conservative scheduling) instead of the mean; `None` or 0 maps by the mean.
    #[serde(default)]
    pub conservative_tf: Option<f64>,
    /// How load enters the estimates, other than the agent's default.
    #[serde(default)]
    pub load_model: Option<crate::LoadModel>,
    /// Map as if moving data between servers cost nothing (a mapper that knows no links), then
    /// predict the mapping with the links as they are: what learning links is worth.
    #[serde(default)]
    pub link_blind: bool,
}

/// A live server as the plan numbers it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlannedServer {
    pub server_id: ServerId,
    pub name: String,
    /// Where clients and peers reach it.
    pub addr: String,
    /// Calls it runs at once, at least 1.
    pub slots: u32,
    /// Its calibrated default rate, operations/s (0 when it did not calibrate).
    pub default_rate: f64,
}

/// A measured link the mapping used.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlannedLink {
    /// Sending server (index into [`GraphPlan::servers`]).
    pub from: u32,
    /// Receiving server.
    pub to: u32,
    /// One-way latency, s.
    pub latency_s: f64,
    /// Bandwidth, bytes/s.
    pub bandwidth: f64,
}

/// The agent's mapping of a graph, with everything needed to check or redraw its prediction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GraphPlan {
    /// The policy that mapped it: the one requested, else the default for the graph's shape.
    pub policy: GraphPolicy,
    /// Whether the request named it (false: the default for the graph's shape).
    pub policy_requested: bool,
    /// The live servers the graph was mapped on (indices below refer to this list).
    pub servers: Vec<PlannedServer>,
    /// Server of each call.
    pub server_of: Vec<u32>,
    /// Each server's calls, in the order it runs them.
    pub order: Vec<Vec<u32>>,
    /// One assignment per call when the request reserved, else empty; pass each to the server
    /// with its call.
    pub tickets: Vec<Ticket>,
    /// Estimated time every call holds every server: compute, plus what the server's recent
    /// calls cost it besides queue and kernel (row-major calls × servers, s;
    /// infinite where it cannot run).
    pub etc: Vec<f64>,
    /// `(call, server)` pairs with no estimate at all: no calibrated rate, model or past call
    /// anywhere, so their `etc` is the agent's assumed time for the unknown.
    pub unknown: Vec<(u32, u32)>,
    /// Latency assumed where no link was measured, s.
    pub default_latency_s: f64,
    /// Bandwidth assumed where no link was measured, bytes/s.
    pub default_bandwidth: f64,
    /// Links measured between the plan's servers.
    pub links: Vec<PlannedLink>,
    /// The site of each server, read off the measured links (fast links join a site): the
    /// transfers between two sites in one direction took turns on one path in the
    /// prediction. All 0 (or empty) when nothing was shared.
    pub site_of: Vec<u32>,
    /// What every data edge was charged besides its link, s: the producer's reply reaching the
    /// client and the consumer's request reaching its server, each at the mean time the
    /// servers' recent calls took to cross their client links (the default latency for a
    /// server none was measured to).
    pub dispatch_s: f64,
    /// Predicted start of each call, s from the start of the graph.
    pub start_s: Vec<f64>,
    /// Predicted end of each call, s from the start of the graph.
    pub end_s: Vec<f64>,
    /// Lane (of its server's slots) each call runs in.
    pub lane: Vec<u32>,
    /// Predicted makespan, s.
    pub makespan_s: f64,
    /// Its standard deviation, from replaying the plan with every call's time drawn from its
    /// estimate's spread (0 when no estimate has a known spread).
    #[serde(default)]
    pub makespan_sd_s: f64,
    /// The 5th and 95th percentiles of those replays' makespans.
    #[serde(default)]
    pub makespan_interval90_s: Option<(f64, f64)>,
    /// No mapping can finish sooner: the best of critical path, work ÷ total slots, and the LP
    /// bounds where the graph is small enough (`gridwise_sched::best_lower_bound`).
    pub lower_bound_s: f64,
    /// Which bound `lower_bound_s` is: `critical_path`, `total_work`, `lp` or `lp_window`.
    #[serde(default)]
    pub lower_bound_kind: String,
    /// Longest chain with every call at its best time, free transfers.
    pub critical_path_s: f64,
    /// Best-case total work ÷ critical path.
    pub average_parallelism: f64,
    /// Sum of every call's best time, s.
    pub total_work_s: f64,
}

/// An input of a graph call: a value the client sends, or an output of an earlier call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CallInput<'a> {
    /// Sent by the client.
    Value(&'a Value),
    /// Output number `output` (over the producer's OUT and INOUT arguments) of call `call`.
    Output {
        /// The producing call (its index in the graph).
        call: usize,
        /// Which of its outputs.
        output: usize,
    },
}

/// One call of a graph as recorded, for [`check_graph`].
#[derive(Clone, Debug)]
pub struct RecordedCall<'a> {
    /// Its name, for messages.
    pub name: &'a str,
    pub desc: &'a ServiceDesc,
    /// Its IN and INOUT arguments, in order.
    pub inputs: Vec<CallInput<'a>>,
}

/// A graph that passed [`check_graph`]: the agent's request, and who feeds whom.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckedGraph {
    /// What to send the agent, each edge carrying the bytes of the output it moves.
    pub request: GraphRequest,
    /// Per call, the calls that use its outputs (each once).
    pub consumers: Vec<Vec<usize>>,
    /// Per call, the calls whose outputs it uses (each once).
    pub producers: Vec<Vec<usize>>,
}

/// `ty` with its dimensions resolved from `ints` (e.g. `matrix<f64>[500,400]`), for comparing
/// an output with the input it feeds.
fn resolved(ty: &ArgType, ints: &[(String, i64)]) -> String {
    let dim = |d: &Dim| match d {
        Dim::Fixed(n) => n.to_string(),
        Dim::Arg(a) => ints
            .iter()
            .find(|(k, _)| k == a)
            .map_or_else(|| a.clone(), |(_, v)| v.to_string()),
    };
    match ty {
        ArgType::Vector { elem, len } => format!("vector<{elem}>[{}]", dim(len)),
        ArgType::Matrix { elem, rows, cols } => {
            format!("matrix<{elem}>[{},{}]", dim(rows), dim(cols))
        }
        other => other.to_string(),
    }
}

/// Checks a recorded graph — the one check of graphs, for the client library and the graph-file
/// reader alike: every call's argument count and values against its service's description;
/// every argument taken from another call refers to an earlier call, to an output it has, is
/// not an int (ints size a call and must be known to map it), and has the kind, element type
/// and shape that output has. Returns the agent's request (each edge carrying the bytes of the
/// output it moves) or the first problem, naming the call.
pub fn check_graph(
    calls: &[RecordedCall<'_>],
    policy: Option<GraphPolicy>,
    reserve: bool,
) -> Result<CheckedGraph, String> {
    if calls.is_empty() {
        return Err("the graph has no calls; record some first".into());
    }
    let n = calls.len();
    let mut ints: Vec<Vec<(String, i64)>> = Vec::with_capacity(n);
    let mut out_calls = Vec::with_capacity(n);
    let mut edges = Vec::new();
    let (mut consumers, mut producers) = (vec![Vec::new(); n], vec![Vec::new(); n]);
    for (i, c) in calls.iter().enumerate() {
        let here = |m: String| format!("call `{}`: {m}", c.name);
        let desc = c.desc;
        let inputs: Vec<&ArgDesc> = desc.inputs().collect();
        if inputs.len() != c.inputs.len() {
            return Err(here(format!(
                "`{}` takes {} input(s), {} given: {}",
                desc.name,
                inputs.len(),
                c.inputs.len(),
                desc.signature()
            )));
        }
        let my_ints: Vec<(String, i64)> = inputs
            .iter()
            .zip(&c.inputs)
            .filter_map(|(a, v)| match v {
                CallInput::Value(Value::Int(x)) => Some((a.name.clone(), *x)),
                _ => None,
            })
            .collect();
        let mut shadow = Vec::with_capacity(c.inputs.len());
        for (a, arg) in inputs.iter().zip(&c.inputs) {
            match *arg {
                CallInput::Value(v) => shadow.push(v.clone()),
                CallInput::Output { call: p, output } => {
                    if p >= i {
                        return Err(here(format!(
                            "argument `{}` uses call #{p}, which is not recorded before it \
                             (a call may use outputs of earlier calls of the same graph)",
                            a.name
                        )));
                    }
                    let (pd, pn) = (calls[p].desc, calls[p].name);
                    let outs: Vec<&ArgDesc> = pd.outputs().collect();
                    let Some(out) = outs.get(output) else {
                        let names: Vec<String> = outs
                            .iter()
                            .enumerate()
                            .map(|(k, o)| format!("{k}: {}", o.name))
                            .collect();
                        return Err(here(format!(
                            "argument `{}` uses output {output} of `{pn}`, but `{}` has {} \
                             output(s), numbered from 0 ({})",
                            a.name,
                            pd.name,
                            outs.len(),
                            names.join(", ")
                        )));
                    };
                    if a.ty == ArgType::Int {
                        return Err(here(format!(
                            "argument `{}` is an int, which sizes the call: give it as a \
                             value, not as `{pn}`'s output",
                            a.name
                        )));
                    }
                    let (want, have) = (resolved(&a.ty, &my_ints), resolved(&out.ty, &ints[p]));
                    if want != have {
                        return Err(here(format!(
                            "argument `{}` must be {want}, but output {output} (`{}`) of \
                             `{pn}` is {have}",
                            a.name, out.name
                        )));
                    }
                    let bytes = pd.output_bytes_for_sizes(&ints[p])[output];
                    edges.push(GraphEdge {
                        from: p as u32,
                        to: i as u32,
                        bytes,
                    });
                    if !producers[i].contains(&p) {
                        producers[i].push(p);
                        consumers[p].push(i);
                    }
                    // A stand-in with the right kind, so the profile counts it as data from
                    // elsewhere (an edge), not as bytes the client sends.
                    shadow.push(Value::Ref(RemoteRef {
                        handle: DataHandle(uuid::Uuid::nil()),
                        holder: String::new(),
                        bytes,
                        kind: have,
                        idle_ttl_ms: 0,
                    }));
                }
            }
        }
        let mut profile = desc.profile(&shadow).map_err(|e| here(e.to_string()))?;
        profile.remote_in.clear();
        out_calls.push(GraphCall {
            name: c.name.to_string(),
            profile,
            // Set below, once every consumer is known.
            fetched: false,
        });
        ints.push(my_ints);
    }
    // By default the sinks' outputs come back (a client that names what to fetch says so).
    for (c, cons) in out_calls.iter_mut().zip(&consumers) {
        c.fetched = cons.is_empty();
    }
    Ok(CheckedGraph {
        request: GraphRequest {
            conservative_tf: None,
            load_model: None,
            link_blind: false,
            calls: out_calls,
            edges,
            policy,
            reserve,
        },
        consumers,
        producers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::ArgMode;

    fn dgemm() -> ServiceDesc {
        ServiceDesc {
            memory: None,
            name: "dgemm".into(),
            doc: String::new(),
            args: vec![
                ArgDesc::new("m", ArgMode::In, "int"),
                ArgDesc::new("n", ArgMode::In, "int"),
                ArgDesc::new("k", ArgMode::In, "int"),
                ArgDesc::new("A", ArgMode::In, "matrix<f64>[m,k]"),
                ArgDesc::new("B", ArgMode::In, "matrix<f64>[k,n]"),
                ArgDesc::new("C", ArgMode::Out, "matrix<f64>[m,n]"),
            ],
            size_params: vec!["m".into(), "n".into(), "k".into()],
            complexity: Some("2*m*n*k".into()),
            duration: None,
        }
    }

    #[test]
    fn edges_carry_output_bytes_and_shapes_must_match() {
        let d = dgemm();
        let (two, three) = (Value::Int(2), Value::Int(3));
        let a = Value::matrix_f64(2, 2, &[1.0; 4]);
        let first = RecordedCall {
            name: "a",
            desc: &d,
            inputs: vec![
                CallInput::Value(&two),
                CallInput::Value(&two),
                CallInput::Value(&two),
                CallInput::Value(&a),
                CallInput::Value(&a),
            ],
        };
        let second = RecordedCall {
            name: "b",
            desc: &d,
            inputs: vec![
                CallInput::Value(&two),
                CallInput::Value(&two),
                CallInput::Value(&two),
                CallInput::Output { call: 0, output: 0 },
                CallInput::Value(&a),
            ],
        };
        let g = check_graph(&[first.clone(), second.clone()], None, false).unwrap();
        assert_eq!(
            g.request.edges,
            vec![GraphEdge {
                from: 0,
                to: 1,
                bytes: 32
            }]
        );
        assert_eq!(
            (g.producers[1].clone(), g.consumers[0].clone()),
            (vec![0], vec![1])
        );
        assert_eq!(g.request.calls[1].profile.in_bytes, 8 * 3 + 32);
        // A 3×3 consumer of a 2×2 output.
        let mut bad = second.clone();
        bad.inputs[0] = CallInput::Value(&three);
        bad.inputs[2] = CallInput::Value(&three);
        let three_by = Value::matrix_f64(3, 2, &[1.0; 6]);
        bad.inputs[4] = CallInput::Value(&three_by);
        let e = check_graph(&[first.clone(), bad], None, false).unwrap_err();
        assert!(
            e.contains("call `b`") && e.contains("must be matrix<f64>[3,3]"),
            "{e}"
        );
        // Forward references, missing outputs, ints from outputs.
        let mut fwd = second.clone();
        fwd.inputs[3] = CallInput::Output { call: 1, output: 0 };
        assert!(
            check_graph(&[first.clone(), fwd], None, false)
                .unwrap_err()
                .contains("not recorded before")
        );
        let mut missing = second.clone();
        missing.inputs[3] = CallInput::Output { call: 0, output: 5 };
        assert!(
            check_graph(&[first.clone(), missing], None, false)
                .unwrap_err()
                .contains("has 1 output")
        );
        let mut int = second;
        int.inputs[0] = CallInput::Output { call: 0, output: 0 };
        assert!(
            check_graph(&[first, int], None, false)
                .unwrap_err()
                .contains("is an int")
        );
        assert!(check_graph(&[], None, false).is_err());
    }
}
