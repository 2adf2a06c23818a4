//! How a server measures a link (to a peer or to the agent): latency from the best of three
//! empty round trips, bandwidth from a 1 MiB message and, when that went by too fast to time
//! well, from a second one sized for the link. And when to probe: at a random phase and
//! with jitter, so that servers started together do not probe together and measure each
//! other's probes instead of the link.

use gridwise_proto::LinkSample;
use std::future::Future;
use std::time::{Duration, Instant};

/// The first message: enough for a slow link.
pub const FIRST_BYTES: usize = 1 << 20;
/// A message faster than this is timed again at a size fitted to the link: its fixed costs
/// (serialising, the reply's round trip, TCP's slow start) would otherwise be much of it.
const TOO_FAST_S: f64 = 0.04;
/// What the second message aims to take.
const AIM_S: f64 = 0.1;
/// The most a probe sends a peer server in one message.
pub const PEER_MAX_BYTES: usize = 32 << 20;
/// The most a probe sends the agent in one message: the agent's frames are 16 MiB by default,
/// and a larger one would cost the server its connection.
pub const AGENT_MAX_BYTES: usize = 8 << 20;
const _: () = assert!(
    AGENT_MAX_BYTES < 16 << 20,
    "below the agent's default frame limit"
);

/// Whether the round trips were taken while the link was busy (with another server's probe
/// or a transfer): queued behind it, they are long next to the message's time, and
/// subtracting them would make the link look faster than it is.
pub fn busy(rtt_s: f64, secs: f64) -> bool {
    rtt_s > 0.1 * secs && rtt_s > 0.002
}

/// The most a probe of `addr` sends in one message: `max` across a network, the first
/// message alone to a peer on loopback, where a link is the host's memory and a large probe
/// only takes CPU from the calls (16 servers on one host copied ~8 GiB a minute).
pub fn max_bytes_to(addr: &str, max: usize) -> usize {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) if ip.is_loopback() => FIRST_BYTES,
        _ if host == "localhost" => FIRST_BYTES,
        _ => max,
    }
}

/// The size of a second message after the first took `secs` net of the round trip, if one
/// is needed.
pub fn second_probe_bytes(first_bytes: usize, secs: f64, max_bytes: usize) -> Option<usize> {
    if secs >= TOO_FAST_S || max_bytes <= first_bytes {
        return None;
    }
    let rate = first_bytes as f64 / secs.max(1e-6);
    Some(((rate * AIM_S) as usize).clamp(first_bytes, max_bytes))
}

/// Measures the link with `send(n)`, which delivers an `n`-byte message (never more than
/// `max_bytes`) and waits for its acknowledgement (`n = 0` for a round trip).
pub async fn measure<F, Fut, T, E>(to: &str, max_bytes: usize, mut send: F) -> Result<LinkSample, E>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut last = None;
    // Twice at most: a second time, after a pause, when the link was busy the first time.
    for attempt in 0..2 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let mut rtt = f64::INFINITY;
        for _ in 0..3 {
            let t = Instant::now();
            send(0).await?;
            rtt = rtt.min(t.elapsed().as_secs_f64());
        }
        let timed = |bytes: usize, t: Instant| (bytes, (t.elapsed().as_secs_f64() - rtt).max(1e-6));
        let t = Instant::now();
        send(FIRST_BYTES).await?;
        let mut best = timed(FIRST_BYTES, t);
        if let Some(bytes) = second_probe_bytes(best.0, best.1, max_bytes) {
            let t = Instant::now();
            send(bytes).await?;
            best = timed(bytes, t);
        }
        let sample = LinkSample {
            to: to.to_string(),
            latency_s: rtt / 2.0,
            bandwidth_bytes_per_s: best.0 as f64 / best.1,
        };
        let done = !busy(rtt, best.1);
        last = Some(sample);
        if done {
            break;
        }
    }
    Ok(last.expect("one attempt at least"))
}

/// What a pull of `bytes` from `holder` that took `secs` says of the link, net of the
/// `latency_s` its last probe measured; `None` when it went by too fast to time well (as a
/// probe's message must not, [`TOO_FAST_S`]). A probe's messages go back to back on a warm
/// connection; a slab's 1 MiB rows, pulled once a step, got 85–90% of the rate probes measured
/// across a 100 Mbit/s link, and the plan's exchange came out 10–25% short. Inside a site the
/// same row takes 8 ms, which a moment's wait for a core doubles: no sample.
pub fn pulled(holder: &str, bytes: u64, secs: f64, latency_s: f64) -> Option<LinkSample> {
    (secs >= TOO_FAST_S && secs > latency_s).then(|| LinkSample {
        to: holder.to_string(),
        latency_s,
        bandwidth_bytes_per_s: bytes as f64 / (secs - latency_s),
    })
}

/// The wait before the next round of probes: the whole interval × U(0, 1) for the first (a
/// random phase), × U(0.75, 1.25) after.
pub fn next_round_in(interval: Duration, first: bool) -> Duration {
    use rand::Rng;
    let u: f64 = rand::rng().random();
    let f = if first { u } else { 0.75 + 0.5 * u };
    interval.mul_f64(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fast_link_gets_a_second_probe_sized_for_it() {
        // 1 MiB in 100 ms: 10 MB/s, timed well enough.
        assert_eq!(second_probe_bytes(FIRST_BYTES, 0.1, PEER_MAX_BYTES), None);
        // 1 MiB in 8 ms (a gigabit): about 13 MB for 100 ms.
        let b = second_probe_bytes(FIRST_BYTES, 0.008, PEER_MAX_BYTES).unwrap();
        assert!((12 << 20..14 << 20).contains(&b), "{b}");
        // Loopback speeds stop at the cap, which for the agent is below its frame limit.
        assert_eq!(
            second_probe_bytes(FIRST_BYTES, 1e-5, PEER_MAX_BYTES),
            Some(PEER_MAX_BYTES)
        );
        assert_eq!(
            second_probe_bytes(FIRST_BYTES, 1e-5, AGENT_MAX_BYTES),
            Some(AGENT_MAX_BYTES)
        );
    }

    #[test]
    fn loopback_peers_get_the_first_message_only() {
        assert_eq!(max_bytes_to("127.0.0.1:7100", PEER_MAX_BYTES), FIRST_BYTES);
        assert_eq!(max_bytes_to("[::1]:7100", PEER_MAX_BYTES), FIRST_BYTES);
        assert_eq!(max_bytes_to("localhost:7100", AGENT_MAX_BYTES), FIRST_BYTES);
        assert_eq!(
            max_bytes_to("10.201.1.2:7100", PEER_MAX_BYTES),
            PEER_MAX_BYTES
        );
        assert_eq!(
            second_probe_bytes(
                FIRST_BYTES,
                1e-5,
                max_bytes_to("127.0.0.1:1", PEER_MAX_BYTES)
            ),
            None
        );
    }

    #[test]
    fn round_trips_long_next_to_the_message_mean_a_busy_link() {
        // 0.2 ms round trips beside an 84 ms message (1 MiB at 100 Mbit/s): quiet.
        assert!(!busy(0.0002, 0.084));
        // 30 ms round trips: queued behind someone else's transfer.
        assert!(busy(0.03, 0.084));
        // A slow link's long message makes a few ms of round trip ordinary.
        assert!(!busy(0.004, 0.4));
    }

    #[test]
    fn a_pull_long_enough_to_time_is_a_sample_net_of_latency() {
        // 1 MiB across 100 Mbit/s at 85%: 98.7 ms, 0.2 ms of it latency.
        let s = pulled("10.201.2.1:7100", 1 << 20, 0.0987, 0.0002).unwrap();
        assert_eq!(s.to, "10.201.2.1:7100");
        let mbit = s.bandwidth_bytes_per_s * 8e-6;
        assert!((mbit - 85.2).abs() < 0.5, "{mbit}");
        // The same row inside a site: 9 ms, too short to time.
        assert_eq!(pulled("10.201.1.1:7100", 1 << 20, 0.009, 0.0002), None);
    }

    #[test]
    fn rounds_start_at_a_random_phase_and_keep_jittering() {
        let i = Duration::from_secs(10);
        for _ in 0..100 {
            assert!(next_round_in(i, true) <= i);
            let d = next_round_in(i, false);
            assert!(d >= Duration::from_millis(7500) && d <= Duration::from_millis(12500));
        }
    }
}
