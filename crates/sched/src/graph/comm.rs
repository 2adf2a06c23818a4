//! What moving data between servers costs: a latency and a bandwidth per ordered pair of
//! servers, and a dispatch cost on every data edge.
//!
//! Each server's links out are one row. Servers whose rows are the same share it: a platform of
//! 1,000 servers in 4 classes ([`CommModel::by_class`]) keeps 4 rows, not a million links, so
//! working out when a task's inputs arrive on every server reads rows that stay in cache. A row
//! says nothing true about a server's link to itself (a transfer there costs the dispatch only),
//! which is what lets servers of one class share a row.

use super::platform::PlatformError;
use super::shared_rows::SharedRows;
use super::sites::Sites;

/// Latency and bandwidth between every ordered pair of servers, and what every data edge costs
/// on top wherever its ends are (its dispatch: 0 unless set); a transfer between two tasks on
/// the same server costs only the dispatch (the output is already there).
#[derive(Clone, Debug)]
pub struct CommModel {
    servers: usize,
    /// Per stored row, one value per receiving server.
    latency_s: Vec<f64>,
    /// Seconds per byte; kept inverted so a transfer is a multiply and infinite bandwidth is 0.
    s_per_byte: Vec<f64>,
    /// Per sending server, its row.
    rows: SharedRows,
    dispatch_s: f64,
    /// Where transfers between sites share a path; None when they never do.
    sites: Option<Sites>,
    /// Whether a task's inputs start moving only once it is sent, after its last producer
    /// (see [`CommModel::pulled_when_sent`]).
    pulled_when_sent: bool,
}

/// Equal when every link between two distinct servers and the dispatch are, however the rows
/// are shared.
impl PartialEq for CommModel {
    fn eq(&self, other: &Self) -> bool {
        self.servers == other.servers
            && self.dispatch_s == other.dispatch_s
            && self.sites == other.sites
            && self.pulled_when_sent == other.pulled_when_sent
            && (0..self.servers).all(|a| {
                let (l, s) = self.links_from(a);
                let (ol, os) = other.links_from(a);
                (0..self.servers).all(|b| a == b || (l[b] == ol[b] && s[b] == os[b]))
            })
    }
}

impl CommModel {
    /// Every transfer is free (zero latency, infinite bandwidth).
    pub fn free(servers: usize) -> Self {
        CommModel {
            servers,
            latency_s: vec![0.0; servers],
            s_per_byte: vec![0.0; servers],
            rows: SharedRows::new(vec![0; servers], 1),
            dispatch_s: 0.0,
            sites: None,
            pulled_when_sent: false,
        }
    }

    /// Charges every data edge `dispatch_s` more, on one server or across two: what it takes,
    /// once a producer has finished, for its consumer to start for that reason. A graph run
    /// sends a consumer only once its producer's reply is back at the client, so even an
    /// output that stays where it is costs the client a round trip.
    pub fn with_dispatch(mut self, dispatch_s: f64) -> Result<Self, PlatformError> {
        if !(dispatch_s >= 0.0 && dispatch_s.is_finite()) {
            return Err(PlatformError::Dispatch(dispatch_s));
        }
        self.dispatch_s = dispatch_s;
        Ok(self)
    }

    /// What every data edge costs on top of its link (see [`CommModel::with_dispatch`]).
    pub fn dispatch_s(&self) -> f64 {
        self.dispatch_s
    }

    /// A task's inputs move only once the task is sent, and it is sent once its last
    /// producer is done: how a graph runs in gridwise, where the client sends a call when
    /// every producer's reply is back and the server then pulls its remote inputs. Without
    /// this (the textbook model HEFT plans with) each input starts moving when its own
    /// producer ends, so a transfer from a producer that ends early overlaps the wait for a
    /// later one; on the test bed a join whose remote input was ready 0.15 s before its
    /// local one started those 0.15 s later than that model said.
    pub fn pulled_when_sent(mut self) -> Self {
        self.pulled_when_sent = true;
        self
    }

    /// Whether inputs move only once their task is sent ([`CommModel::pulled_when_sent`]).
    pub fn is_pulled_when_sent(&self) -> bool {
        self.pulled_when_sent
    }

    /// Transfers between two sites in one direction take turns on one path (see
    /// [`Sites`]); a single site shares nothing and is the same as none.
    pub fn with_sites(mut self, sites: Sites) -> Result<Self, PlatformError> {
        if sites.servers() != self.servers {
            return Err(PlatformError::Sites {
                sites_for: sites.servers(),
                servers: self.servers,
            });
        }
        self.sites = (sites.count() > 1).then_some(sites);
        Ok(self)
    }

    /// The sites whose transfers share paths, when there are two or more.
    pub fn sites(&self) -> Option<&Sites> {
        self.sites.as_ref()
    }

    /// A transfer of `bytes` from `from` to another server, in parts: (latency s, the seconds
    /// its bytes hold the link). The dispatch comes on top.
    #[inline]
    pub fn link_parts(&self, from: usize, to: usize, bytes: u64) -> (f64, f64) {
        let i = self.rows.row(from) * self.servers + to;
        (self.latency_s[i], bytes as f64 * self.s_per_byte[i])
    }

    /// The same latency (s) and bandwidth (bytes/s) between every pair of distinct servers.
    pub fn uniform(servers: usize, latency_s: f64, bandwidth: f64) -> Result<Self, PlatformError> {
        Self::by_class(&vec![0; servers], |_, _| (latency_s, bandwidth))
    }

    /// Links by server class: server `s` is of class `class_of[s]`, and `link(a, b)` is the
    /// (latency s, bandwidth bytes/s) from a server of class `a` to another of class `b`. The
    /// servers of a class share one row.
    pub fn by_class(
        class_of: &[usize],
        link: impl Fn(usize, usize) -> (f64, f64),
    ) -> Result<Self, PlatformError> {
        let servers = class_of.len();
        let classes = class_of.iter().max().map_or(0, |&c| c + 1);
        // The first two servers of each class: a link is checked only where two distinct
        // servers use it, and an error names them.
        let mut members = vec![(usize::MAX, usize::MAX); classes];
        for (s, &c) in class_of.iter().enumerate() {
            let m = &mut members[c];
            if m.0 == usize::MAX {
                m.0 = s;
            } else if m.1 == usize::MAX {
                m.1 = s;
            }
        }
        let mut c = CommModel {
            servers,
            latency_s: Vec::with_capacity(classes * servers),
            s_per_byte: Vec::with_capacity(classes * servers),
            rows: SharedRows::new(
                class_of
                    .iter()
                    .map(|&c| u32::try_from(c).expect("fewer than 2^32 classes"))
                    .collect(),
                classes,
            ),
            dispatch_s: 0.0,
            sites: None,
            pulled_when_sent: false,
        };
        for from in 0..classes {
            let checked: Vec<(f64, f64)> = (0..classes)
                .map(|to| {
                    let (latency_s, bandwidth) = link(from, to);
                    let a = members[from].0;
                    let b = if from == to {
                        members[to].1
                    } else {
                        members[to].0
                    };
                    if a != usize::MAX && b != usize::MAX {
                        check_link(a, b, latency_s, bandwidth)?;
                    }
                    Ok((latency_s, 1.0 / bandwidth))
                })
                .collect::<Result<_, PlatformError>>()?;
            for &to in class_of {
                c.latency_s.push(checked[to].0);
                c.s_per_byte.push(checked[to].1);
            }
        }
        Ok(c)
    }

    /// Sets the link `from -> to` (one direction; links may be asymmetric). `f64::INFINITY`
    /// bandwidth means bytes cost nothing, only latency. A row `from` shares with other servers
    /// is copied first, unless it already says this.
    pub fn set_link(
        &mut self,
        from: usize,
        to: usize,
        latency_s: f64,
        bandwidth: f64,
    ) -> Result<(), PlatformError> {
        for server in [from, to] {
            if server >= self.servers {
                return Err(PlatformError::UnknownServer {
                    server,
                    servers: self.servers,
                });
            }
        }
        check_link(from, to, latency_s, bandwidth)?;
        let s_per_byte = 1.0 / bandwidth;
        let (l, s) = self.links_from(from);
        if l[to] == latency_s && s[to] == s_per_byte {
            return Ok(());
        }
        let i = self.own_row(from) * self.servers + to;
        self.latency_s[i] = latency_s;
        self.s_per_byte[i] = s_per_byte;
        Ok(())
    }

    /// The row `from` may write to: its own, copied out of a row other servers share.
    fn own_row(&mut self, from: usize) -> usize {
        let (latency_s, s_per_byte, servers) =
            (&mut self.latency_s, &mut self.s_per_byte, self.servers);
        self.rows.own(from, |r| {
            latency_s.extend_from_within(r * servers..(r + 1) * servers);
            s_per_byte.extend_from_within(r * servers..(r + 1) * servers);
        })
    }

    pub fn servers(&self) -> usize {
        self.servers
    }

    /// How many rows of links are stored (servers sending by the same links share one).
    pub fn stored_rows(&self) -> usize {
        (0..self.rows.rows())
            .filter(|&r| self.rows.is_read(r))
            .count()
    }

    /// Seconds to move `bytes` from a task on `from` to a task on `to`: the dispatch +
    /// latency + bytes ÷ bandwidth, and only the dispatch on the same server.
    #[inline]
    pub fn transfer_s(&self, from: usize, to: usize, bytes: u64) -> f64 {
        if from == to {
            return self.dispatch_s;
        }
        let (latency_s, busy_s) = self.link_parts(from, to, bytes);
        self.dispatch_s + latency_s + busy_s
    }

    /// The links out of `from`, to every server in order: (latency s, seconds per byte),
    /// without the dispatch. The entry for `from` itself means nothing (it may hold the link
    /// to a server of the same class): a transfer there costs the dispatch only (see
    /// [`CommModel::transfer_s`]).
    #[inline]
    pub fn links_from(&self, from: usize) -> (&[f64], &[f64]) {
        let r = self.rows.row(from);
        let row = r * self.servers..(r + 1) * self.servers;
        (&self.latency_s[row.clone()], &self.s_per_byte[row])
    }

    /// Latency and seconds-per-byte averaged over ordered pairs of distinct servers: HEFT ranks
    /// with the mean transfer because placements are not known yet.
    pub fn mean_link(&self) -> (f64, f64) {
        let m = self.servers;
        if m < 2 {
            return (0.0, 0.0);
        }
        let (mut lat, mut spb) = (0.0, 0.0);
        for a in 0..m {
            let (l, s) = self.links_from(a);
            for b in 0..m {
                if a != b {
                    lat += l[b];
                    spb += s[b];
                }
            }
        }
        let pairs = (m * (m - 1)) as f64;
        (lat / pairs, spb / pairs)
    }
}

/// Written positively so NaN (which fails every comparison) is rejected too.
fn check_link(from: usize, to: usize, latency_s: f64, bandwidth: f64) -> Result<(), PlatformError> {
    if latency_s >= 0.0 && latency_s.is_finite() && bandwidth > 0.0 {
        Ok(())
    } else {
        Err(PlatformError::Link {
            from,
            to,
            latency_s,
            bandwidth,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfers_cost_latency_plus_bytes_over_bandwidth_except_locally() {
        let mut c = CommModel::uniform(3, 0.01, 1e6).unwrap();
        assert_eq!(c.transfer_s(0, 0, 1_000_000), 0.0);
        assert!((c.transfer_s(0, 1, 1_000_000) - 1.01).abs() < 1e-12);
        c.set_link(1, 2, 0.5, f64::INFINITY).unwrap();
        assert_eq!(c.transfer_s(1, 2, 123), 0.5);
        assert!(c.set_link(0, 1, -1.0, 1.0).is_err());
        assert!(c.set_link(0, 1, 0.0, 0.0).is_err());
        assert!(c.set_link(0, 3, 0.0, 1.0).is_err());
        assert_eq!(CommModel::free(1).mean_link(), (0.0, 0.0));
        // A dispatch is charged on every edge, on one server or across two.
        let d = c.clone().with_dispatch(0.25).unwrap();
        assert_eq!(d.transfer_s(0, 0, 1_000_000), 0.25);
        assert!((d.transfer_s(0, 1, 1_000_000) - 1.26).abs() < 1e-12);
        assert_eq!(d.links_from(0), c.links_from(0));
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            assert!(c.clone().with_dispatch(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn servers_of_a_class_share_a_row_until_one_of_their_links_changes() {
        // Servers 0, 1 in class 0; 2, 3, 4 in class 1. Within a class 1 ms and 1 GB/s,
        // across 10 ms and 100 MB/s, and 1 → 0 slower still.
        let link = |a: usize, b: usize| match (a, b) {
            (1, 0) => (0.02, 5e7),
            _ if a == b => (0.001, 1e9),
            _ => (0.01, 1e8),
        };
        let class_of = [0, 0, 1, 1, 1];
        let mut c = CommModel::by_class(&class_of, link).unwrap();
        assert_eq!(c.stored_rows(), 2);
        // The same as setting every link of distinct servers one by one.
        let mut dense = CommModel::free(5);
        for a in 0..5 {
            for b in (0..5).filter(|&b| b != a) {
                let (l, bw) = link(class_of[a], class_of[b]);
                dense.set_link(a, b, l, bw).unwrap();
            }
        }
        assert_eq!(c, dense);
        assert_eq!(dense.stored_rows(), 5);
        assert_eq!(c.mean_link(), dense.mean_link());
        for (a, b) in [(0, 1), (1, 0), (2, 0), (0, 3), (4, 2)] {
            assert_eq!(c.transfer_s(a, b, 1 << 20), dense.transfer_s(a, b, 1 << 20));
        }
        assert_eq!(c.transfer_s(3, 3, 1 << 20), 0.0);
        // A link set to what it is copies nothing; a new one copies only its sender's row.
        c.set_link(2, 3, 0.001, 1e9).unwrap();
        assert_eq!(c.stored_rows(), 2);
        c.set_link(2, 3, 0.5, 1e9).unwrap();
        dense.set_link(2, 3, 0.5, 1e9).unwrap();
        assert_eq!(c.stored_rows(), 3);
        assert_eq!(c, dense);
        assert_eq!(c.transfer_s(4, 3, 0), 0.001);
        // A bad link is named by two servers that would use it; one nobody uses is not checked.
        let bad = |a: usize, b: usize| {
            if (a, b) == (1, 1) {
                (-1.0, 1e9)
            } else {
                (0.0, 1e9)
            }
        };
        assert_eq!(
            CommModel::by_class(&class_of, bad),
            Err(PlatformError::Link {
                from: 2,
                to: 3,
                latency_s: -1.0,
                bandwidth: 1e9
            })
        );
        assert!(CommModel::by_class(&[0, 1], bad).is_ok());
    }
}
