//! The TCP connect of every dial, made robust to a lost SYN.
//!
//! The kernel resends an unanswered SYN only after 1 s, then 3 s more. A dial begun while a
//! partition drops packets (or whose SYN met a full listen queue) therefore connects a second
//! or more after the path is back, and whatever waits on that dial waits with it: on the test
//! bed, calls moved to a healed server reached it 1.0–1.2 s after the heal in 4 cuts of 64,
//! queued behind the connection a call had begun to open during the cut. So while no attempt
//! has connected, a fresh one starts every [`SYN_RESEND`]; the first to connect is used and
//! the others are dropped (their sockets closed, their handshakes, if any, abandoned).

use super::WireError;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use std::time::Duration;
use tokio::net::TcpStream;

/// How long an attempt may go unanswered before another starts beside it: above a LAN's or a
/// loaded link's round trip (the test bed's slow client link queues 200 ms), far below the
/// kernel's 1 s SYN resend.
pub const SYN_RESEND: Duration = Duration::from_millis(250);
/// Attempts left waiting at once; more would only add SYNs to a path that drops them.
const MOST_PENDING: usize = 4;

/// Connects to `addr` within `within`. An attempt refused or failing outright ends the dial
/// with its error when no other is pending, as a single connect would: only silence is
/// answered with another attempt.
pub async fn connect_tcp(addr: &str, within: Duration) -> Result<TcpStream, WireError> {
    let mut pending = FuturesUnordered::new();
    let mut resend = tokio::time::interval(SYN_RESEND);
    resend.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let deadline = tokio::time::sleep(within);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            biased;
            Some(done) = pending.next(), if !pending.is_empty() => match done {
                Ok(stream) => return Ok(stream),
                Err(source) if pending.is_empty() => {
                    return Err(WireError::Connect { addr: addr.to_string(), source });
                }
                Err(_) => {}
            },
            _ = &mut deadline => {
                return Err(WireError::Timeout {
                    addr: addr.to_string(),
                    secs: within.as_secs_f64(),
                });
            }
            _ = resend.tick(), if pending.len() < MOST_PENDING => {
                pending.push(TcpStream::connect(addr.to_string()));
            }
        }
    }
}

/// Drops `stream`'s connection when data sent on it stays unacknowledged for `limit`
/// (`TCP_USER_TIMEOUT`; the kernel checks at each retransmission, so the drop comes at the
/// first one past `limit`: about 0.6 s for 0.5 s on a link whose round trip is below 200 ms).
/// Best effort: where the option is missing the connection keeps the kernel's default.
pub fn limit_unacked(stream: &TcpStream, limit: Duration) {
    use std::os::fd::AsRawFd;
    let ms = libc::c_uint::try_from(limit.as_millis()).unwrap_or(libc::c_uint::MAX);
    // SAFETY: the descriptor is the open socket `stream` owns; the option value is a c_uint
    // of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            (&ms as *const libc::c_uint).cast(),
            std::mem::size_of::<libc::c_uint>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        tracing::debug!(
            "TCP_USER_TIMEOUT not set: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpSocket;

    /// A listener whose accept queue is full drops every SYN, as a cut network does; once
    /// accepted from, it takes the next one.
    #[tokio::test]
    async fn a_dial_whose_first_syn_is_lost_connects_before_the_kernel_would_resend_it() {
        let sock = TcpSocket::new_v4().unwrap();
        sock.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = sock.local_addr().unwrap().to_string();
        let listener = sock.listen(0).unwrap();
        // Fill the accept queue: connects past its length hang, their SYNs dropped.
        let mut fillers = Vec::new();
        for _ in 0..4 {
            if let Ok(Ok(s)) =
                tokio::time::timeout(Duration::from_millis(100), TcpStream::connect(&addr)).await
            {
                fillers.push(s);
            }
        }
        assert!(
            !fillers.is_empty(),
            "no connection reached the listener at all"
        );
        let dial = tokio::spawn({
            let addr = addr.clone();
            // Shorter than the kernel's first SYN resend (1 s): a single connect whose SYN
            // was dropped cannot make it.
            async move { connect_tcp(&addr, Duration::from_millis(800)).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Make room: the dial's next fresh SYN is taken.
        let mut accepted = Vec::new();
        while let Ok(Ok((s, _))) =
            tokio::time::timeout(Duration::from_millis(20), listener.accept()).await
        {
            accepted.push(s);
        }
        let dialled = dial.await.unwrap();
        assert!(
            dialled.is_ok(),
            "the dial did not connect once the listener had room: {dialled:?}"
        );
    }

    #[tokio::test]
    async fn a_refused_dial_fails_at_once_with_the_reason() {
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let e = connect_tcp(&addr, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(
            matches!(e, WireError::Connect { .. }),
            "expected the refusal, got {e}"
        );
    }
}
