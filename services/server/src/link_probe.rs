//! How a server measures a link (to a peer or to the agent): latency from the best of three
//! empty round trips, bandwidth from a 1 MiB message and, when that went by too fast to time
//! well, from a second one sized for the link. And when to probe: at a random phase and
//! with jitter, so that servers started together do not probe together and measure each
//! other's probes instead of the link.

use gridwise_proto::{LinkSample, ServerState, ServerStatus};
use std::future::Future;
use std::time::{Duration, Instant};

/// The first message: enough for a slow link.
pub const FIRST_BYTES: usize = 1 << 20;
/// A message faster than this is timed again at a size fitted to the link: its fixed costs
/// (serialising, the reply's round trip, TCP's slow start) would otherwise be much of it.
const TOO_FAST_S: f64 = 0.04;
/// What the second message aims to take.
const AIM_S: f64 = 0.1;
/// The most a probe sends in one message (on a bulk connection, which reads and drops it).
pub const MAX_BYTES: usize = 32 << 20;
const _: () = assert!(
    MAX_BYTES as u64 <= gridwise_runtime::wire::bulk::PROBE_MAX_BYTES,
    "no larger than a daemon reads"
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

/// Probe rounds in a row a link may be skipped as busy before it is measured anyway.
pub const MOST_SKIPPED: u32 = 3;

/// Whether round trips of `rtt_s` queued behind other data on a link whose quiet latency is
/// `quiet_latency_s`: a shaper's queue (200 ms deep on the test bed) adds tens of ms.
fn queued(rtt_s: f64, quiet_latency_s: f64) -> bool {
    rtt_s > 4.0 * quiet_latency_s + 0.001
}

/// Measures the link with `send(n)`, which delivers an `n`-byte message (never more than
/// `max_bytes`) and waits for its acknowledgement (`n = 0` for a round trip). `None` when the
/// round trips show the link carrying other data twice, 300 ms apart, compared with
/// `quiet_latency_s`: the messages would measure that data's share and take from it (a 50 MB
/// pull across a 100 Mbit/s uplink lost 12% to other servers' probes).
pub async fn measure<F, Fut, T, E>(
    to: &str,
    max_bytes: usize,
    quiet_latency_s: Option<f64>,
    mut send: F,
) -> Result<Option<LinkSample>, E>
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
        if quiet_latency_s.is_some_and(|l| queued(rtt, l)) {
            continue;
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
            inbound: false,
        };
        let done = !busy(rtt, best.1);
        last = Some(sample);
        if done {
            break;
        }
    }
    Ok(last)
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
        inbound: true,
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

/// How long no call may have run and no value moved here before a probe round starts.
pub const QUIET: Duration = Duration::from_secs(2);
/// Probe intervals a round waits for a quiet spell at most: a server that is never quiet
/// still measures its links now and then (its pulls also measure them, as calls use them).
const MOST_DEFERRED: u32 = 4;

/// Whether a probe round that fell due `waited` ago waits longer: while calls run here, or
/// for [`QUIET`] after data last moved here or work last went on elsewhere in the grid
/// (`quiet_for`, the shorter of the two: [`GridRest`]); a probe beside a graph's pulls
/// measured them instead of the link, and slowed them. For up to [`MOST_DEFERRED`] intervals.
pub fn wait_for_quiet(
    busy_calls: u32,
    quiet_for: Duration,
    waited: Duration,
    every: Duration,
) -> bool {
    (busy_calls > 0 || quiet_for < QUIET) && waited < every * MOST_DEFERRED
}

/// Whether `s` is at work as the agent's status shows it: calls running or waiting at its last
/// heartbeat, or assigned and not yet reported.
pub fn at_work(s: &ServerStatus) -> bool {
    s.state == ServerState::Up && (s.load.running > 0 || s.load.queued > 0 || s.pending > 0)
}

/// Whether a server other than `me` is at work in the agent's view of the grid.
pub fn others_at_work(servers: &[ServerStatus], me: &str) -> bool {
    servers.iter().any(|s| s.addr != me && at_work(s))
}

/// How long the other servers of the grid have been at rest, from the agent's status looked at
/// now and then (every [`QUIET`] / 2 while a round waits). A round waits for the grid, not only
/// for its own server: an idle server's probe crosses the paths the others' data takes, and
/// on the test bed a slab's rows inside a site, 8 ms a step, took 16–21 ms for six steps in a
/// row, and a graph's 2 MB transfer across sites twice its planned 0.17 s, while servers with
/// nothing to do probed. Calls that began and ended between two looks still show, in the
/// count of calls the servers completed.
#[derive(Debug)]
pub struct GridRest {
    since: Instant,
    completed: Option<u64>,
}

impl GridRest {
    pub fn new(now: Instant) -> Self {
        Self {
            since: now,
            completed: None,
        }
    }

    /// Takes a look at the grid's servers (this one, `me`, left out: its own calls are known
    /// better at home) and says how long the others have been at rest.
    pub fn look(&mut self, servers: &[ServerStatus], me: &str, now: Instant) -> Duration {
        let completed = servers
            .iter()
            .filter(|s| s.addr != me)
            .map(|s| s.completed)
            .sum::<u64>();
        let ended_since = self.completed.is_some_and(|c| c != completed);
        if others_at_work(servers, me) || ended_since {
            self.since = now;
        }
        self.completed = Some(completed);
        now.saturating_duration_since(self.since)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trips_that_queued_behind_other_data_are_told_from_a_quiet_link() {
        // Quiet: 0.1 ms each way on the test bed, 25 ms across a continent.
        assert!(!queued(0.0003, 0.0001));
        assert!(queued(0.02, 0.0001));
        assert!(!queued(0.06, 0.025));
        assert!(queued(0.25, 0.025));
    }

    #[tokio::test]
    async fn a_busy_link_is_not_measured_and_a_quiet_one_is() {
        // A link whose round trips take `rtt` and which moves `rate` bytes/s.
        let link = |rtt: f64, rate: f64| {
            move |n: usize| async move {
                tokio::time::sleep(Duration::from_secs_f64(rtt + n as f64 / rate)).await;
                Ok::<(), ()>(())
            }
        };
        let busy = measure("p", MAX_BYTES, Some(0.0001), link(0.03, 1e8)).await;
        assert_eq!(busy, Ok(None));
        let quiet = measure("p", MAX_BYTES, Some(0.0001), link(0.0002, 1e8))
            .await
            .unwrap()
            .expect("a sample");
        let ratio = quiet.bandwidth_bytes_per_s / 1e8;
        assert!((0.8..1.05).contains(&ratio), "{quiet:?}");
        // Never measured before: nothing to compare with, so measured.
        assert!(
            measure("p", MAX_BYTES, None, link(0.03, 1e8))
                .await
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn a_probe_waits_for_a_quiet_spell_but_not_forever() {
        let every = Duration::from_secs(15);
        let s = Duration::from_secs;
        assert!(!wait_for_quiet(0, s(3), s(0), every));
        assert!(wait_for_quiet(1, s(3), s(0), every));
        assert!(wait_for_quiet(0, Duration::from_millis(500), s(10), every));
        assert!(!wait_for_quiet(2, s(0), s(60), every));
    }

    use super::*;

    fn server(addr: &str, running: u32, pending: u32, completed: u64) -> ServerStatus {
        ServerStatus {
            id: gridwise_proto::ServerId(uuid::Uuid::nil()),
            name: addr.to_string(),
            addr: addr.to_string(),
            state: ServerState::Up,
            services: Vec::new(),
            slots: 1,
            pending,
            completed,
            load: gridwise_proto::LoadSample {
                running,
                ..Default::default()
            },
            last_heard_s: 0.0,
            default_rate: 1.0,
            not_offered: Vec::new(),
        }
    }

    #[test]
    fn the_grid_rests_while_no_other_server_works_or_ends_a_call() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut rest = GridRest::new(t0);
        let idle = [server("a", 0, 0, 5), server("b", 0, 0, 7)];
        assert_eq!(rest.look(&idle, "a", at(1)), Duration::from_secs(1));
        assert_eq!(rest.look(&idle, "a", at(2)), Duration::from_secs(2));
        // Another server's call: at work.
        let working = [server("a", 0, 0, 5), server("b", 1, 0, 7)];
        assert_eq!(rest.look(&working, "a", at(3)), Duration::ZERO);
        // This server's own calls are not the grid's.
        let mine = [server("a", 1, 2, 5), server("b", 0, 0, 7)];
        assert_eq!(rest.look(&mine, "a", at(4)), Duration::from_secs(1));
        // A call assigned and not yet reported, or one that began and ended between looks.
        let assigned = [server("a", 0, 0, 5), server("b", 0, 1, 7)];
        assert_eq!(rest.look(&assigned, "a", at(5)), Duration::ZERO);
        let ended = [server("a", 0, 0, 5), server("b", 0, 0, 8)];
        assert_eq!(rest.look(&ended, "a", at(6)), Duration::ZERO);
        assert_eq!(rest.look(&ended, "a", at(8)), Duration::from_secs(2));
        // A server that is down is not at work, whatever its last heartbeat said.
        let mut down = server("b", 3, 0, 8);
        down.state = ServerState::Down;
        assert!(!at_work(&down));
    }

    #[test]
    fn a_fast_link_gets_a_second_probe_sized_for_it() {
        // 1 MiB in 100 ms: 10 MB/s, timed well enough.
        assert_eq!(second_probe_bytes(FIRST_BYTES, 0.1, MAX_BYTES), None);
        // 1 MiB in 8 ms (a gigabit): about 13 MB for 100 ms.
        let b = second_probe_bytes(FIRST_BYTES, 0.008, MAX_BYTES).unwrap();
        assert!((12 << 20..14 << 20).contains(&b), "{b}");
        // Loopback speeds stop at the cap.
        assert_eq!(
            second_probe_bytes(FIRST_BYTES, 1e-5, MAX_BYTES),
            Some(MAX_BYTES)
        );
    }

    #[test]
    fn loopback_peers_get_the_first_message_only() {
        assert_eq!(max_bytes_to("127.0.0.1:7100", MAX_BYTES), FIRST_BYTES);
        assert_eq!(max_bytes_to("[::1]:7100", MAX_BYTES), FIRST_BYTES);
        assert_eq!(max_bytes_to("localhost:7100", MAX_BYTES), FIRST_BYTES);
        assert_eq!(max_bytes_to("10.201.1.2:7100", MAX_BYTES), MAX_BYTES);
        assert_eq!(
            second_probe_bytes(FIRST_BYTES, 1e-5, max_bytes_to("127.0.0.1:1", MAX_BYTES)),
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
