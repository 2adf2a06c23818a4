//! The floors `bench rpc` judges a call against, each measured on this machine in the same
//! run: a bare loopback round trip, the same polled, the hop into a client runtime, two round
//! trips through tokio peers (the stack floor), and two through the RPC stack itself — tarpc
//! over gridwise's frames and bincode — to peers that answer at once (the RPC floor). Set
//! side by side they say which layer a call's time goes to.

use crate::rpc::percentile_us;
use futures::StreamExt;
use gridwise_runtime::wire::{self, FrameCodec};
use serde_json::json;
use std::time::Instant;
use tarpc::server::{BaseChannel, Channel};

/// A peer's address and the thread serving it, which ends when its connection closes.
type Peer = (
    std::net::SocketAddr,
    std::thread::JoinHandle<std::io::Result<()>>,
);

/// Round trips each floor below times per turn (a tenth of its total), after `WARM` that warm
/// the path up.
const ROUNDS: usize = 500;
const WARM: usize = 50;
/// The size of `add`'s messages.
const SIZE: usize = 64;

/// The floors a call is judged against, measured in turns between the synchronous calls: on a
/// shared VM the bare round trip alone drifts by a third between runs, so a floor taken once,
/// after the calls, compared them with another machine.
#[derive(Default)]
pub(crate) struct Floors {
    /// Bare blocking round trips: two threads, TCP_NODELAY.
    loopback: Vec<f64>,
    /// The same with the client polling its socket between yields, as the blocking client
    /// polls for its call ([`gridwise_client::blocking::SPIN`]). A VM wakes a halted CPU in
    /// 40–60 µs but a polled one at once, and how long the host keeps polling a halted one
    /// depends on the recent past: the blocking figure swings between the two.
    loopback_polled: Vec<f64>,
    /// The same, issued as the blocking client issues a call: a task on a runtime thread.
    runtime: Vec<f64>,
    /// What the design cannot avoid: from the calling thread, one task on a runtime thread
    /// makes a round trip to each of two peers that, like the agent and the server, serve on a
    /// current-thread tokio runtime.
    stack: Vec<f64>,
    /// The same through the RPC stack a call takes — a tarpc client over gridwise's frames and
    /// bincode, served as the daemons serve — to peers whose method answers at once: what a
    /// call costs before the agent ranks or the server runs anything.
    rpc: Vec<f64>,
}

impl Floors {
    /// `ROUNDS` more round trips of each floor, each on a connection of its own.
    pub(crate) fn turn(&mut self) -> anyhow::Result<()> {
        self.loopback.extend(loopback_rtts(false)?);
        self.loopback_polled.extend(loopback_rtts(true)?);
        self.runtime.extend(runtime_rtts(1)?);
        self.stack.extend(runtime_rtts(2)?);
        self.rpc.extend(rpc_rtts()?);
        Ok(())
    }

    /// The floors' p50s on a client's line, and its sync p50 over each.
    pub(crate) fn add_to(&self, line: &mut serde_json::Value) {
        let (bare, polled, stack, rpc) = (
            percentile_us(&self.loopback, 50),
            percentile_us(&self.loopback_polled, 50),
            percentile_us(&self.stack, 50),
            percentile_us(&self.rpc, 50),
        );
        line["loopback_rtt_p50_us"] = json!(bare);
        line["loopback_polled_rtt_p50_us"] = json!(polled);
        line["runtime_rtt_p50_us"] = json!(percentile_us(&self.runtime, 50));
        line["stack_floor_p50_us"] = json!(stack);
        line["rpc_floor_p50_us"] = json!(rpc);
        if let Some(sync) = line["sync_p50_us"].as_f64() {
            let ratio = |floor: f64| json!((sync / floor * 1000.0).round() / 1000.0);
            line["sync_p50_over_loopback_rtt"] = ratio(bare);
            line["sync_p50_over_loopback_polled_rtt"] = ratio(polled);
            line["sync_p50_over_stack_floor"] = ratio(stack);
            line["sync_p50_over_rpc_floor"] = ratio(rpc);
        }
    }
}

/// A thread echoing `ROUNDS + WARM` messages of `SIZE` bytes on one loopback connection, with
/// blocking reads and writes.
fn echo_peer() -> anyhow::Result<Peer> {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        let mut buf = [0u8; SIZE];
        for _ in 0..ROUNDS + WARM {
            s.read_exact(&mut buf)?;
            s.write_all(&buf)?;
        }
        Ok(())
    });
    Ok((addr, echo))
}

/// A thread serving one loopback connection with `serve`, on a current-thread tokio runtime of
/// its own, as the daemons serve.
fn tokio_peer<F, Fut>(serve: F) -> anyhow::Result<Peer>
where
    F: FnOnce(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = std::io::Result<()>>,
{
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let peer = std::thread::spawn(move || -> std::io::Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener)?;
            let (s, _) = listener.accept().await?;
            s.set_nodelay(true)?;
            serve(s).await
        })
    });
    Ok((addr, peer))
}

/// The echo served the way the daemons serve.
fn async_echo_peer() -> anyhow::Result<Peer> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tokio_peer(|mut s| async move {
        let mut buf = [0u8; SIZE];
        for _ in 0..ROUNDS + WARM {
            s.read_exact(&mut buf).await?;
            s.write_all(&buf).await?;
        }
        Ok(())
    })
}

/// Round trips issued the way the blocking client issues a call: from the calling thread, as
/// one task on a current-thread tokio runtime of its own thread, which does the I/O and hands
/// the answer back, waited for as the client waits (`wait_for_task`); µs. With `peers` 1 the
/// peer is a blocking echo thread (beside the bare round trip it shows what the hop into the
/// runtime and back costs); with 2 the task makes a round trip to each of two tokio echo
/// peers, as a call does to the agent and the server.
fn runtime_rtts(peers: usize) -> anyhow::Result<Vec<f64>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let echoes = (0..peers)
        .map(|_| {
            if peers == 1 {
                echo_peer()
            } else {
                async_echo_peer()
            }
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let rt = ClientRuntime::start()?;
    let streams = echoes
        .iter()
        .map(|(addr, _)| rt.connect(addr))
        .collect::<std::io::Result<Vec<_>>>()?;
    let streams = std::sync::Arc::new(tokio::sync::Mutex::new(streams));
    let rtt = rt.time_rounds(|_| {
        let s = streams.clone();
        async move {
            let mut s = s.lock().await;
            let mut buf = [7u8; SIZE];
            for peer in s.iter_mut() {
                peer.write_all(&buf).await?;
                peer.read_exact(&mut buf).await?;
            }
            Ok(())
        }
    })?;
    rt.stop()?;
    join_peers(echoes)?;
    Ok(rtt)
}

/// A current-thread runtime driven by a thread of its own, as the blocking client's is.
struct ClientRuntime {
    handle: tokio::runtime::Handle,
    stop: tokio::sync::oneshot::Sender<()>,
    driver: std::thread::JoinHandle<()>,
}

impl ClientRuntime {
    fn start() -> anyhow::Result<ClientRuntime> {
        let (handle, stop, driver) = gridwise_client::blocking::start_runtime()?;
        Ok(ClientRuntime {
            handle,
            stop,
            driver,
        })
    }

    /// A connection to `addr` on this runtime, TCP_NODELAY.
    fn connect(&self, addr: &std::net::SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
        self.handle.block_on(async {
            let s = tokio::net::TcpStream::connect(addr).await?;
            s.set_nodelay(true)?;
            Ok(s)
        })
    }

    /// `ROUNDS + WARM` rounds, each `round(i)` spawned as one task and waited for here as the
    /// blocking client waits for a call; the last `ROUNDS` timed, µs.
    fn time_rounds<F, Fut>(&self, mut round: F) -> anyhow::Result<Vec<f64>>
    where
        F: FnMut(usize) -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let mut rtt = Vec::with_capacity(ROUNDS);
        for i in 0..ROUNDS + WARM {
            let t = Instant::now();
            let task = self.handle.spawn(round(i));
            gridwise_client::blocking::wait_for_task(&self.handle, task)??;
            if i >= WARM {
                rtt.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
        Ok(rtt)
    }

    fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        self.driver
            .join()
            .map_err(|_| anyhow::anyhow!("the runtime thread panicked"))
    }
}

/// Waits for the peers' threads.
fn join_peers(peers: impl IntoIterator<Item = Peer>) -> anyhow::Result<()> {
    for (_, peer) in peers {
        peer.join()
            .map_err(|_| anyhow::anyhow!("a peer thread panicked"))??;
    }
    Ok(())
}

/// Bare loopback TCP round trips of `add`'s size (two threads, TCP_NODELAY), µs: the floor a
/// call's two round trips (agent, server) are judged against on this machine. `polled`: the
/// client polls a non-blocking socket between yields instead of sleeping in `read`.
fn loopback_rtts(polled: bool) -> anyhow::Result<Vec<f64>> {
    use std::io::{ErrorKind, Read, Write};
    let (addr, echo) = echo_peer()?;
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    s.set_nonblocking(polled)?;
    let mut buf = [7u8; SIZE];
    let mut rtt = Vec::with_capacity(ROUNDS);
    for i in 0..ROUNDS + WARM {
        let t = Instant::now();
        let mut sent = 0;
        while sent < SIZE {
            match s.write(&buf[sent..]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        let mut got = 0;
        while got < SIZE {
            match s.read(&mut buf[got..]) {
                Ok(0) => anyhow::bail!("the echo thread closed the connection"),
                Ok(n) => got += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        if i >= WARM {
            rtt.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    echo.join()
        .map_err(|_| anyhow::anyhow!("the echo thread panicked"))??;
    Ok(rtt)
}

/// The RPC floor's service: one method that answers at once.
#[tarpc::service]
trait Nothing {
    async fn nothing(x: u64) -> u64;
}

#[derive(Clone)]
struct Answer;

impl Nothing for Answer {
    async fn nothing(self, _: tarpc::context::Context, x: u64) -> u64 {
        x
    }
}

/// Frames the floor's messages as every gridwise connection frames them.
fn framed(s: tokio::net::TcpStream) -> wire::FramedTcp {
    tokio_util::codec::Framed::new(
        tokio_util::either::Either::Left(s),
        FrameCodec::new(1 << 20),
    )
}

/// [`Nothing`] served as the daemons serve a connection: its requests run concurrently in
/// its task.
fn nothing_peer() -> anyhow::Result<Peer> {
    tokio_peer(|s| async move {
        let transport = tokio_serde::Framed::new(
            framed(s),
            wire::messages::Messages::<
                tarpc::ClientMessage<NothingRequest>,
                tarpc::Response<NothingResponse>,
            >::default(),
        );
        BaseChannel::with_defaults(transport)
            .execute(Answer.serve())
            .for_each_concurrent(None, |answer| answer)
            .await;
        Ok(())
    })
}

/// Two no-op RPCs per round, one to each of two [`nothing_peer`]s, issued as the blocking
/// client issues a call (a task on a client runtime thread, waited for by `wait_for_task`); µs.
fn rpc_rtts() -> anyhow::Result<Vec<f64>> {
    let peers = [nothing_peer()?, nothing_peer()?];
    let rt = ClientRuntime::start()?;
    let mut clients = Vec::new();
    for (addr, _) in &peers {
        let transport = wire::client_transport(framed(rt.connect(addr)?));
        // The client's dispatch task goes to the runtime.
        let _on = rt.handle.enter();
        clients.push(NothingClient::new(wire::client_config(), transport).spawn());
    }
    let clients = std::sync::Arc::new(clients);
    let rtt = rt.time_rounds(|i| {
        let cs = clients.clone();
        async move {
            for c in cs.iter() {
                let ctx = wire::context(std::time::Duration::from_secs(10));
                anyhow::ensure!(
                    c.nothing(ctx, i as u64).await? == i as u64,
                    "a wrong answer"
                );
            }
            Ok(())
        }
    })?;
    // The connections close as their clients go; the peers then end.
    drop(clients);
    rt.stop()?;
    join_peers(peers)?;
    Ok(rtt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_times_every_floor_and_the_line_sets_the_call_beside_each() {
        let mut floors = Floors::default();
        floors.turn().unwrap();
        for (name, samples) in [
            ("loopback", &floors.loopback),
            ("polled", &floors.loopback_polled),
            ("runtime", &floors.runtime),
            ("stack", &floors.stack),
            ("rpc", &floors.rpc),
        ] {
            assert_eq!(samples.len(), ROUNDS, "{name}");
            assert!(samples.iter().all(|&s| s > 0.0), "{name}");
        }
        let mut line = json!({"sync_p50_us": 1000.0});
        floors.add_to(&mut line);
        for (floor, ratio) in [
            ("loopback_rtt_p50_us", "sync_p50_over_loopback_rtt"),
            (
                "loopback_polled_rtt_p50_us",
                "sync_p50_over_loopback_polled_rtt",
            ),
            ("stack_floor_p50_us", "sync_p50_over_stack_floor"),
            ("rpc_floor_p50_us", "sync_p50_over_rpc_floor"),
        ] {
            let f = line[floor].as_f64().unwrap();
            let r = line[ratio].as_f64().unwrap();
            assert!(f > 0.0, "{line}");
            assert!((r - 1000.0 / f).abs() <= 0.001, "{ratio}: {line}");
        }
        assert!(line["runtime_rtt_p50_us"].as_f64().unwrap() > 0.0);
    }
}
