//! `gridwise bench transfer`: moving large arrays through gridwise against a raw loopback TCP
//! copy of the same bytes measured in the same run, with the peak memory of both ends.
//!
//! Three directions on a grid of two servers offering `sink` and `source` (kernels that only
//! move data):
//! - client → server: `sink(n, x)` on one server; the time is the call's input transfer as the
//!   server measured it (first byte sent to the call's arrival, the staging included);
//! - server → server: `source(n)` kept on one server, then `sink` on the other with that
//!   reference (a graph's edge); the time is the second server's pull;
//! - server → client: `source(n)`; the time is the client's round trip less the server's time
//!   and the request's transfer.
//!
//! Peak RSS is each process's high-water mark (`VmHWM`), reset before every transfer through
//! `/proc/<pid>/clear_refs`: the client is this process, the servers are daemons.

use gridwise_client::Client;
use gridwise_localgrid::{LocalGrid, wait_for_servers};
use gridwise_proto::Value;
use serde_json::json;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// Sizes moved, MiB.
pub const SIZES_MIB: [u64; 3] = [16, 64, 256];
/// Transfers timed per (direction, size); the best is reported, as for the raw copy.
const REPEATS: usize = 3;

/// What to measure.
#[derive(Clone, Debug)]
pub struct TransferBench {
    /// Sizes, MiB (default [`SIZES_MIB`]).
    pub sizes_mib: Vec<u64>,
}

impl Default for TransferBench {
    fn default() -> Self {
        Self {
            sizes_mib: SIZES_MIB.to_vec(),
        }
    }
}

/// Runs the benchmark; one JSON object per (direction, size).
pub fn run(opts: &TransferBench, emit: &mut dyn FnMut(serde_json::Value)) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let mut grid = LocalGrid::start_gridwise(&exe, &[])?;
    let server_toml = "builtins = [\"sink\", \"source\"]\ncalibrate = false\n";
    for name in ["t1", "t2"] {
        grid.add_server(name, server_toml)?;
    }
    let client = Client::connect(grid.client_config())?;
    wait_for_servers(&client, 2, Duration::from_secs(30))?;
    let pids = [grid.servers[0].pid(), grid.servers[1].pid()];
    let me = std::process::id();
    let sink = |s: &str| client.function_handle_init("sink", s);
    let source = |s: &str| client.function_handle_init("source", s);
    let (sink1, sink2, source1) = (sink("t1")?, sink("t2")?, source("t1")?);
    for &mib in &opts.sizes_mib {
        let bytes = mib * 1024 * 1024;
        let n = (bytes / 8) as i64;
        eprintln!("bench transfer: {mib} MiB, raw loopback copy …");
        let raw = best_of(|| raw_copy_s(bytes as usize))?;
        let raw_mb_per_s = bytes as f64 / raw / 1e6;

        eprintln!("bench transfer: {mib} MiB, client → server …");
        let mut one = || -> anyhow::Result<(f64, Rss)> {
            let x = Value::vector_f64(&(0..n).map(|i| i as f64).collect::<Vec<_>>());
            let rss = Rss::reset(me, pids[0])?;
            let r = client.call(&sink1, vec![Value::Int(n), x])?;
            anyhow::ensure!(
                r.outputs == vec![Value::Int(bytes as i64)],
                "sink received {:?}, not {bytes} bytes",
                r.outputs
            );
            Ok((r.timing.input_transfer_s, rss.read()?))
        };
        let (s, rss) = best_rss(&mut one)?;
        emit(line("client_to_server", bytes, s, raw_mb_per_s, rss));

        eprintln!("bench transfer: {mib} MiB, server → server …");
        let mut one = || -> anyhow::Result<(f64, Rss)> {
            let kept = client.call_keep(&source1, vec![Value::Int(n)], &[0])?;
            let Some(Value::Ref(r)) = kept.outputs.first().cloned() else {
                anyhow::bail!("source did not keep its output: {:?}", kept.outputs);
            };
            let rss = Rss::reset(pids[0], pids[1])?;
            let got = client.call(&sink2, vec![Value::Int(n), Value::Ref(r.clone())]);
            let measured = rss.read()?;
            client.free(&[r])?;
            let got = got?;
            anyhow::ensure!(
                got.outputs == vec![Value::Int(bytes as i64)],
                "sink received {:?}, not {bytes} bytes",
                got.outputs
            );
            Ok((got.timing.input_transfer_s, measured))
        };
        let (s, rss) = best_rss(&mut one)?;
        emit(line("server_to_server", bytes, s, raw_mb_per_s, rss));

        eprintln!("bench transfer: {mib} MiB, server → client …");
        let mut one = || -> anyhow::Result<(f64, Rss)> {
            let rss = Rss::reset(pids[0], me)?;
            let r = client.call(&source1, vec![Value::Int(n)])?;
            let measured = rss.read()?;
            let y = r.outputs.first().and_then(Value::as_array);
            anyhow::ensure!(
                y.is_some_and(|a| a.data.len() as u64 == bytes
                    && a.data[a.data.len() - 8..] == ((n - 1) as f64).to_le_bytes()),
                "source returned other data"
            );
            let s = r.round_trip_s - r.timing.server_s - r.timing.input_transfer_s;
            Ok((s.max(1e-9), measured))
        };
        let (s, rss) = best_rss(&mut one)?;
        emit(line("server_to_client", bytes, s, raw_mb_per_s, rss));
    }
    drop(grid);
    Ok(())
}

fn line(direction: &str, bytes: u64, secs: f64, raw_mb_per_s: f64, rss: Rss) -> serde_json::Value {
    let mb_per_s = bytes as f64 / secs / 1e6;
    let mb = |b: u64| (b as f64 / 1e6 * 10.0).round() / 10.0;
    let ratio = |x: f64| (x * 100.0).round() / 100.0;
    json!({
        "bench": "transfer",
        "direction": direction,
        "bytes": bytes,
        "mb_per_s": mb_per_s.round(),
        "raw_mb_per_s": raw_mb_per_s.round(),
        "vs_raw": ratio(mb_per_s / raw_mb_per_s),
        "peak_rss_sender_mb": mb(rss.sender),
        "peak_rss_receiver_mb": mb(rss.receiver),
        "sender_rss_over_payload": ratio(rss.sender as f64 / bytes as f64),
        "receiver_rss_over_payload": ratio(rss.receiver as f64 / bytes as f64),
    })
}

/// The fastest of [`REPEATS`] runs, with the memory of that run.
fn best_rss(one: &mut dyn FnMut() -> anyhow::Result<(f64, Rss)>) -> anyhow::Result<(f64, Rss)> {
    let mut best: Option<(f64, Rss)> = None;
    for _ in 0..REPEATS {
        let (s, rss) = one()?;
        if best.as_ref().is_none_or(|b| s < b.0) {
            best = Some((s, rss));
        }
    }
    best.ok_or_else(|| anyhow::anyhow!("no run"))
}

fn best_of(mut one: impl FnMut() -> anyhow::Result<f64>) -> anyhow::Result<f64> {
    let mut best = f64::INFINITY;
    for _ in 0..REPEATS {
        best = best.min(one()?);
    }
    Ok(best)
}

/// Peak resident memory of the sending and receiving processes, bytes.
#[derive(Clone, Copy, Debug)]
struct Rss {
    sender: u64,
    receiver: u64,
}

/// Two processes whose peaks are being watched.
struct Watch {
    sender: u32,
    receiver: u32,
}

impl Rss {
    /// Resets both processes' high-water marks.
    fn reset(sender: u32, receiver: u32) -> anyhow::Result<Watch> {
        for pid in [sender, receiver] {
            std::fs::write(format!("/proc/{pid}/clear_refs"), "5").map_err(|e| {
                anyhow::anyhow!(
                    "resetting the peak RSS of process {pid} (/proc/{pid}/clear_refs): {e}"
                )
            })?;
        }
        Ok(Watch { sender, receiver })
    }
}

impl Watch {
    /// The peaks since the reset.
    fn read(self) -> anyhow::Result<Rss> {
        Ok(Rss {
            sender: vm_hwm(self.sender)?,
            receiver: vm_hwm(self.receiver)?,
        })
    }
}

/// A process's peak resident set since its last reset, bytes.
fn vm_hwm(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| anyhow::anyhow!("no VmHWM in /proc/{pid}/status"))
}

/// Seconds to copy `bytes` over a loopback TCP connection between two threads, from one
/// buffer into another allocated at its full size: the floor a transfer is judged against.
/// A buffer of `bytes` for the raw copies, on the same pages as gridwise's own (transparent
/// huge pages, [`gridwise_proto::value::array_bytes`]: on a VM, copies over 4 KiB pages run at
/// a fraction of the speed) and written before any clock starts, so a raw copy is timed at
/// the socket's speed alone.
pub(crate) fn raw_buffer(bytes: usize, fill: u8) -> std::io::Result<Vec<u8>> {
    let mut buf = gridwise_proto::value::array_bytes(bytes).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::OutOfMemory,
            format!("cannot allocate {bytes} bytes"),
        )
    })?;
    buf.resize(bytes, fill);
    Ok(buf)
}

fn raw_copy_s(bytes: usize) -> anyhow::Result<f64> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let receiver = std::thread::spawn(move || -> std::io::Result<f64> {
        let (mut s, _) = listener.accept()?;
        let mut buf = raw_buffer(bytes, 1)?;
        s.read_exact(&mut buf[..1])?;
        let t = Instant::now();
        s.read_exact(&mut buf[1..])?;
        let secs = t.elapsed().as_secs_f64();
        s.write_all(&[1])?;
        Ok(secs)
    });
    let data = raw_buffer(bytes, 7)?;
    let mut s = std::net::TcpStream::connect(addr)?;
    let t = Instant::now();
    s.write_all(&data)?;
    let mut ack = [0u8; 1];
    s.read_exact(&mut ack)?;
    let sent = t.elapsed().as_secs_f64();
    let received = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("the receiving thread panicked"))??;
    Ok(sent.max(received))
}
