//! A topology's faults played in time: each partition cut at its `at_s` and healed `for_s`
//! later, each `slow` applied at its time.

use crate::bed::Testbed;
use crate::topology::{Cut, Fault, FaultKind, LinkRef, Rate};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// One change to the network at a time from the start.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Cut(Cut),
    Heal(Cut),
    Slow(LinkRef, Rate),
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::Cut(c) => write!(f, "cut {c}"),
            Event::Heal(c) => write!(f, "heal {c}"),
            Event::Slow(LinkRef::Host(h), r) => write!(f, "host:{h}'s link to {r}"),
            Event::Slow(LinkRef::Site(s), r) => write!(f, "site:{s}'s uplink to {r}"),
        }
    }
}

/// The faults as a timeline of events, in order (a heal at the same time as a cut comes
/// after it).
pub fn timeline(faults: &[Fault]) -> Vec<(f64, Event)> {
    let mut v: Vec<(f64, Event)> = Vec::new();
    for f in faults {
        match &f.kind {
            FaultKind::Partition { cut, for_s } => {
                v.push((f.at_s, Event::Cut(cut.clone())));
                if let Some(d) = for_s {
                    v.push((f.at_s + d, Event::Heal(cut.clone())));
                }
            }
            FaultKind::Slow { link, rate } => v.push((f.at_s, Event::Slow(link.clone(), *rate))),
        }
    }
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

/// Applies `e`; for a cut or a heal, when its first rule was in place.
pub fn apply(bed: &Testbed, e: &Event) -> anyhow::Result<Option<Instant>> {
    match e {
        Event::Cut(c) => bed.cut_or_heal(c, false),
        Event::Heal(c) => bed.cut_or_heal(c, true),
        Event::Slow(l, r) => bed.set_rate(l, *r).map(|()| None),
    }
}

/// An event as it was applied.
#[derive(Clone, Debug)]
pub struct Applied {
    /// When it began to be applied, from the start of the play.
    pub began: Duration,
    /// When its first rule was in place, from the start of the play: a cut is in force from
    /// there on (each rule is a command; starting one took 2-10 ms on the busy test bed, and
    /// a liveness verdict counted from `began` includes it).
    pub held: Option<Duration>,
    pub event: Event,
    pub error: Option<String>,
}

/// A timeline being played on a thread; dropping it stops the play (what was cut stays cut
/// until healed or the bed goes).
pub struct Playing {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Vec<Applied>>>,
}

impl Playing {
    /// Plays `events` from now; `say` hears each one once applied.
    pub fn start(
        bed: Arc<Testbed>,
        events: Vec<(f64, Event)>,
        say: impl Fn(&Applied) + Send + 'static,
    ) -> Playing {
        let (tx, rx) = mpsc::channel::<()>();
        let start = Instant::now();
        let thread = std::thread::spawn(move || {
            let mut done = Vec::new();
            for (at, e) in events {
                let due = start + Duration::from_secs_f64(at);
                let wait = due.saturating_duration_since(Instant::now());
                if !matches!(rx.recv_timeout(wait), Err(mpsc::RecvTimeoutError::Timeout)) {
                    break;
                }
                let began = start.elapsed();
                let (held, error) = match apply(&bed, &e) {
                    Ok(held) => (held.map(|h| h.saturating_duration_since(start)), None),
                    Err(e) => (None, Some(format!("{e:#}"))),
                };
                let applied = Applied {
                    began,
                    held,
                    event: e,
                    error,
                };
                say(&applied);
                done.push(applied);
            }
            done
        });
        Playing {
            stop: Some(tx),
            thread: Some(thread),
        }
    }

    /// Stops the play and returns what was applied: when, what, and any error.
    pub fn finish(mut self) -> Vec<Applied> {
        self.stop.take();
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Playing {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_with_a_duration_heals_after_it() {
        let faults = vec![
            Fault {
                at_s: 2.0,
                kind: FaultKind::Partition {
                    cut: Cut::Host("x".into()),
                    for_s: Some(3.0),
                },
            },
            Fault {
                at_s: 4.0,
                kind: FaultKind::Slow {
                    link: LinkRef::Site("a".into()),
                    rate: Rate(1_000_000),
                },
            },
        ];
        let t = timeline(&faults);
        assert_eq!(
            t,
            vec![
                (2.0, Event::Cut(Cut::Host("x".into()))),
                (4.0, Event::Slow(LinkRef::Site("a".into()), Rate(1_000_000))),
                (5.0, Event::Heal(Cut::Host("x".into()))),
            ]
        );
        assert_eq!(t[1].1.to_string(), "site:a's uplink to 1 Mbit/s");
    }
}
