//! Fuzzing every decoder a peer's bytes reach: the frame codec, the hello, and the RPC
//! messages of both services in both directions. Arbitrary bytes, and valid messages with
//! bytes flipped, inserted, removed or overwritten with huge lengths, must decode or fail —
//! never panic, never hang.
//!
//! CI runs a short pass (256 cases per property). A longer run:
//! `PROPTEST_CASES=100000 cargo test --release -p gridwise-proto --test fuzz_decoders`.

use bytes::BytesMut;
use gridwise_proto::api::{AgentApiRequest, AgentApiResponse, ServerApiRequest, ServerApiResponse};
use gridwise_proto::*;
use gridwise_runtime::wire::{self, Credentials, FrameCodec, MemoryBudget, Role, hello};
use proptest::prelude::*;
use std::net::SocketAddr;
use std::sync::Arc;
use tarpc::{ClientMessage, Response};
use tokio_util::codec::Decoder;

fn request<T>(message: T) -> ClientMessage<T> {
    ClientMessage::Request(tarpc::Request {
        context: tarpc::context::current(),
        id: 7,
        message,
    })
}

fn response<T>(message: T) -> Response<T> {
    Response {
        request_id: 7,
        message: Ok(message),
    }
}

fn profile() -> CallProfile {
    CallProfile {
        service: "dgemm".into(),
        sizes: vec![("m".into(), 100), ("n".into(), 100), ("k".into(), 100)],
        in_bytes: 160_000,
        out_bytes: 80_000,
        remote_in: vec![("10.0.0.1:7100".into(), 80_000)],
        inline_bytes: 0,
    }
}

fn registration() -> Registration {
    Registration {
        name: "s1".into(),
        instance: "abc".into(),
        secret: Some("0123".into()),
        addr: "127.0.0.1:7100".into(),
        slots: 4,
        services: vec![ServiceDesc {
            memory: None,
            name: "dgemm".into(),
            doc: "product".into(),
            args: vec![
                ArgDesc::new("m", ArgMode::In, "int"),
                ArgDesc::new("A", ArgMode::In, "matrix<f64>[m,m]"),
                ArgDesc::new("C", ArgMode::Out, "matrix<f64>[m,m]"),
            ],
            size_params: vec!["m".into()],
            complexity: Some("2*m^3".into()),
            duration: None,
        }],
        rates: vec![("dgemm".into(), 1e9)],
        default_rate: 1e9,
        memory_bytes: 1 << 30,
        cores: 2,
        memory_budget_bytes: 1 << 29,
        max_frame_bytes: 1 << 30,
        sleeping: vec!["emulated".into()],
        not_offered: Vec::new(),
    }
}

fn execute() -> ExecuteRequest {
    ExecuteRequest {
        call_id: CallId::new_random(),
        ticket: Some(Ticket(42)),
        service: "dgemm".into(),
        inputs: vec![
            Value::Int(3),
            Value::matrix_f64(3, 3, &[1.0; 9]),
            Value::Ref(RemoteRef {
                handle: DataHandle::new_random(),
                holder: "10.0.0.2:7100".into(),
                bytes: 72,
                kind: "matrix<f64>[3,3]".into(),
                idle_ttl_ms: 1000,
            }),
            Value::Str("x".into()),
            Value::Bytes(vec![1, 2, 3]),
            Value::Vector(Array::from_i32(2, 1, &[1, 2])),
        ],
        sent_at_unix_ns: 1,
        keep_outputs: vec![0],
        reply_limit_bytes: 1 << 30,
        bulk_outputs: true,
        copy_kept_below_bytes: 65536,
    }
}

/// Valid encodings of every kind of message, to mutate.
fn corpus() -> Vec<(&'static str, Vec<u8>)> {
    let e = |v: &dyn erased::Enc| v.enc();
    vec![
        (
            "agent rank",
            e(&request(AgentApiRequest::Rank {
                profile: profile(),
                options: RankOptions::default(),
            })),
        ),
        (
            "agent register",
            e(&request(AgentApiRequest::Register {
                reg: registration(),
            })),
        ),
        (
            "agent heartbeat",
            e(&request(AgentApiRequest::Heartbeat {
                hb: Heartbeat {
                    server_id: ServerId::new_random(),
                    load: LoadSample::default(),
                    models: vec![],
                    in_flight: Vec::new(),
                },
            })),
        ),
        (
            "agent report",
            e(&request(AgentApiRequest::Report {
                server: ServerId::new_random(),
                reports: vec![CallReport {
                    client_in_bytes: None,
                    cpu_available: None,
                    ticket: Some(Ticket(1)),
                    service: "dgemm".into(),
                    sizes: vec![("m".into(), 3)],
                    timing: Timing::default(),
                    ok: true,
                }],
            })),
        ),
        (
            "agent map_graph",
            e(&request(AgentApiRequest::MapGraph {
                request: GraphRequest {
                    conservative_tf: None,
                    load_model: None,
                    link_blind: false,
                    calls: vec![GraphCall {
                        name: "a".into(),
                        profile: profile(),
                        fetched: false,
                    }],
                    edges: vec![GraphEdge {
                        from: 0,
                        to: 0,
                        bytes: 8,
                    }],
                    policy: Some(GraphPolicy::Heft),
                    reserve: true,
                },
            })),
        ),
        (
            "server execute",
            e(&request(ServerApiRequest::Execute { req: execute() })),
        ),
        (
            "server pull",
            e(&request(ServerApiRequest::Pull {
                handle: DataHandle::new_random(),
                owner: "k".into(),
            })),
        ),
        (
            "server free",
            e(&request(ServerApiRequest::Free {
                handles: vec![DataHandle::new_random(); 3],
            })),
        ),
        (
            "agent answer rank",
            e(&response(AgentApiResponse::Rank(Err(RpcError::new(
                ErrorCode::ServerNotFound,
                "none",
            ))))),
        ),
        (
            "server answer execute",
            e(&response(ServerApiResponse::Execute(Ok(ExecuteReply {
                outputs: vec![Value::matrix_f64(2, 2, &[1.0; 4])],
                timing: Timing::default(),
                server: "s1".into(),
                copies: vec![(1, Value::Int(7))],
            })))),
        ),
    ]
}

mod erased {
    pub trait Enc {
        fn enc(&self) -> Vec<u8>;
    }
    impl<T: serde::Serialize> Enc for T {
        fn enc(&self) -> Vec<u8> {
            gridwise_runtime::wire::messages::encode(self).expect("encodes")
        }
    }
}

/// Every decoder a frame's body may meet.
fn decode_all(bytes: &[u8]) {
    use wire::messages::decode;
    let _ = decode::<ClientMessage<AgentApiRequest>>(bytes);
    let _ = decode::<ClientMessage<ServerApiRequest>>(bytes);
    let _ = decode::<Response<AgentApiResponse>>(bytes);
    let _ = decode::<Response<ServerApiResponse>>(bytes);
    let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let creds = Credentials {
        client_token: Some("c".into()),
        server_token: Some("s".into()),
    };
    let _ = hello::judge(bytes, &creds, None, addr, "fuzz");
}

#[test]
fn the_corpus_decodes() {
    use wire::messages::decode;
    for (name, bytes) in corpus() {
        let ok = decode::<ClientMessage<AgentApiRequest>>(&bytes).is_ok()
            || decode::<ClientMessage<ServerApiRequest>>(&bytes).is_ok()
            || decode::<Response<AgentApiResponse>>(&bytes).is_ok()
            || decode::<Response<ServerApiResponse>>(&bytes).is_ok();
        assert!(ok, "{name} does not decode");
    }
    let dial = wire::DialConfig::new(Role::Client, Some("c".into()));
    let frame = wire::hello_frame(&dial, "me");
    let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let creds = Credentials {
        client_token: Some("c".into()),
        server_token: Some("s".into()),
    };
    assert!(matches!(
        hello::judge(&frame[4..], &creds, None, addr, "n"),
        hello::Verdict::Welcome(_)
    ));
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, Vec<u8>),
    Remove(usize, usize),
    /// A varint or fixed length blown up: 0xff bytes.
    Huge(usize, usize),
    Truncate(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(i, v)| Mutation::Insert(i, v)),
        (any::<usize>(), 1usize..16).prop_map(|(i, n)| Mutation::Remove(i, n)),
        (any::<usize>(), 1usize..10).prop_map(|(i, n)| Mutation::Huge(i, n)),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn apply(mut b: Vec<u8>, muts: &[Mutation]) -> Vec<u8> {
    for m in muts {
        let len = b.len().max(1);
        match m {
            Mutation::Flip(i, x) => {
                if !b.is_empty() {
                    b[i % len] ^= x | 1;
                }
            }
            Mutation::Insert(i, v) => {
                let at = i % (b.len() + 1);
                b.splice(at..at, v.iter().copied());
            }
            Mutation::Remove(i, n) => {
                if !b.is_empty() {
                    let at = i % b.len();
                    let end = (at + n).min(b.len());
                    b.drain(at..end);
                }
            }
            Mutation::Huge(i, n) => {
                if !b.is_empty() {
                    let at = i % b.len();
                    for k in at..(at + n).min(b.len()) {
                        b[k] = 0xff;
                    }
                }
            }
            Mutation::Truncate(i) => b.truncate(i % (b.len() + 1)),
        }
    }
    b
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic_a_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        decode_all(&bytes);
    }

    #[test]
    fn mutated_messages_never_panic_a_decoder(
        which in any::<prop::sample::Index>(),
        muts in proptest::collection::vec(mutation(), 1..6),
    ) {
        let c = corpus();
        let (_, bytes) = &c[which.index(c.len())];
        decode_all(&apply(bytes.clone(), &muts));
    }

    #[test]
    fn mutated_hellos_never_panic(
        role in prop_oneof![Just(Role::Client), Just(Role::Server)],
        muts in proptest::collection::vec(mutation(), 1..6),
    ) {
        let dial = wire::DialConfig::new(role, Some("c".into()));
        let frame = wire::hello_frame(&dial, "me");
        decode_all(&apply(frame[4..].to_vec(), &muts));
    }

    #[test]
    fn framed_streams_in_any_chunks_never_panic_the_codec(
        which in any::<prop::sample::Index>(),
        muts in proptest::collection::vec(mutation(), 0..4),
        chunk in 1usize..300,
    ) {
        let c = corpus();
        let (_, body) = &c[which.index(c.len())];
        let mut stream = (body.len() as u32).to_be_bytes().to_vec();
        stream.extend_from_slice(body);
        let stream = apply(stream, &muts);
        let budget = MemoryBudget::new(1 << 20);
        let activity = Arc::new(wire::Activity::default());
        let mut codec = FrameCodec::guarded(64 << 10, &budget, activity);
        let mut buf = BytesMut::new();
        'feed: for piece in stream.chunks(chunk) {
            buf.extend_from_slice(piece);
            loop {
                match codec.decode(&mut buf) {
                    Ok(Some(frame)) => decode_all(&frame),
                    Ok(None) => break,
                    Err(_) => break 'feed,
                }
            }
        }
    }
}
