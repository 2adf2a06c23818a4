//! Slow senders: connections that say hello and then trickle a large frame a byte at a time,
//! from several loopback addresses, coming back as soon as the daemon closes them — what a
//! peer that wants to lock clients out of a daemon does (the hardening tests and `bench
//! faults`' adversarial phase).

use gridwise_runtime::wire;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Connects from `src` (any address of 127.0.0.0/8 is loopback), says a client's hello and
/// waits for the daemon's reply.
pub async fn hello_from(src: Ipv4Addr, server: SocketAddr) -> std::io::Result<TcpStream> {
    let sock = tokio::net::TcpSocket::new_v4()?;
    sock.bind(SocketAddr::from((src, 0)))?;
    let mut s = sock.connect(server).await?;
    let dial = wire::DialConfig::new(wire::Role::Client, None);
    s.write_all(&wire::hello_frame(&dial, "trickler")).await?;
    let mut reply = [0u8; 512];
    match tokio::time::timeout(Duration::from_secs(5), s.read(&mut reply)).await {
        Ok(Ok(n)) if n > 0 => Ok(s),
        _ => Err(std::io::ErrorKind::ConnectionAborted.into()),
    }
}

/// Sends the header of a 1 MiB frame, then one byte of it every `every` until the daemon
/// closes the connection (true) or `stop` is set (false).
pub async fn trickle(s: &mut TcpStream, every: Duration, stop: &AtomicBool) -> bool {
    if s.write_all(&(1u32 << 20).to_be_bytes()).await.is_err() {
        return true;
    }
    let mut buf = [0u8; 64];
    loop {
        tokio::select! {
            r = s.read(&mut buf) => {
                if matches!(r, Ok(0) | Err(_)) {
                    return true;
                }
            }
            _ = tokio::time::sleep(every) => {
                if stop.load(Ordering::Relaxed) {
                    return false;
                }
                if s.write_all(&[0]).await.is_err() {
                    return true;
                }
            }
        }
    }
}

/// A flood under way; [`Flood::stop`] ends it.
pub struct Flood {
    stop: Arc<AtomicBool>,
    /// Trickling connections the daemon said hello to.
    pub welcomed: Arc<AtomicUsize>,
    /// Of those, how many the daemon closed.
    pub cut: Arc<AtomicUsize>,
}

impl Flood {
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts, on `rt`, `per_source` trickling connections to `server` from each address of
/// `sources`, a byte every `every`; each comes back 10 ms after the daemon closes it, as an
/// attacker would. Panics (in its task) if a source address cannot be bound.
pub fn start(
    rt: &tokio::runtime::Handle,
    server: SocketAddr,
    sources: &[Ipv4Addr],
    per_source: usize,
    every: Duration,
) -> Flood {
    let flood = Flood {
        stop: Arc::default(),
        welcomed: Arc::default(),
        cut: Arc::default(),
    };
    for &src in sources {
        for _ in 0..per_source {
            let (stop, welcomed, cut) = (
                flood.stop.clone(),
                flood.welcomed.clone(),
                flood.cut.clone(),
            );
            rt.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    match hello_from(src, server).await {
                        Ok(mut s) => {
                            welcomed.fetch_add(1, Ordering::Relaxed);
                            if trickle(&mut s, every, &stop).await {
                                cut.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::AddrNotAvailable => {
                            panic!("cannot bind {src}: {e}")
                        }
                        Err(_) => {}
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            });
        }
    }
    flood
}
