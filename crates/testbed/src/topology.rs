//! A test bed's topology, as its TOML file gives it: sites joined through a backbone, hosts in
//! sites, each link's rate, and a schedule of faults. Validation and address assignment are
//! here; nothing in this module touches the network.

use anyhow::{Context, bail, ensure};
use serde::Deserialize;
use std::collections::HashSet;
use std::path::Path;

/// The first two bytes of every address a test bed gives: `10.201.<site>.<host>` for hosts
/// (the site's router is `.254`), `10.200.0.<site>` for routers on the backbone. The range
/// is private and exists only inside the namespaces the bed creates: nothing routes out.
pub const HOST_NET: [u8; 2] = [10, 201];
pub const BACKBONE_NET: [u8; 3] = [10, 200, 0];

/// A link rate in bits per second, written as tc writes it: `20mbit`, `1gbit`, `500kbit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rate(pub u64);

impl Rate {
    pub fn parse(s: &str) -> anyhow::Result<Rate> {
        let t = s.trim().to_ascii_lowercase();
        let (num, mult) = [("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)]
            .iter()
            .find_map(|(u, m)| t.strip_suffix(u).map(|n| (n.trim().to_string(), *m)))
            .with_context(|| {
                format!(
                    "rate {s:?} has no unit: write it as tc does, e.g. \"100mbit\" or \"1gbit\""
                )
            })?;
        let v: f64 = num
            .parse()
            .with_context(|| format!("rate {s:?}: {num:?} is not a number"))?;
        let bits = v * mult;
        ensure!(
            (8e3..=100e9).contains(&bits),
            "rate {s:?} is out of range: between 8kbit and 100gbit"
        );
        Ok(Rate(bits.round() as u64))
    }

    pub fn bytes_per_s(self) -> f64 {
        self.0 as f64 / 8.0
    }

    /// As tc takes it.
    pub fn tc(self) -> String {
        format!("{}bit", self.0)
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = self.0 as f64;
        if b >= 1e9 {
            write!(f, "{} Gbit/s", b / 1e9)
        } else if b >= 1e6 {
            write!(f, "{} Mbit/s", b / 1e6)
        } else {
            write!(f, "{} kbit/s", b / 1e3)
        }
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Rate::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// What a host runs when `gridwise testbed up` starts the grid.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Agent,
    Server,
    /// Where the commands `up` prints run calls from.
    Client,
    /// A host with nothing started on it.
    #[default]
    None,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Site {
    pub name: String,
    /// The site's link to the backbone, shaped both ways: traffic between two sites crosses
    /// both sites' uplinks, so it runs at the slower of the two.
    pub uplink: Rate,
    /// One-way delay on the uplink; needs the kernel's netem, which not every kernel has.
    #[serde(default)]
    pub latency_ms: Option<f64>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Host {
    pub name: String,
    pub site: String,
    /// The host's link to its site's router, shaped both ways.
    pub link: Rate,
    #[serde(default)]
    pub latency_ms: Option<f64>,
    #[serde(default)]
    pub role: Role,
    /// For a server: its config file (relative to the topology file), as `gridwise server
    /// --config` takes it; without one it serves the built-in kernels.
    #[serde(default)]
    pub config: Option<String>,
}

/// A part of the network a partition cuts off: written `host:NAME`, `site:NAME` (the site's
/// uplink, so the site is cut from every other) or `link:SITE-SITE` (only the two sites from
/// each other).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Cut {
    Host(String),
    Site(String),
    Between(String, String),
}

impl Cut {
    pub fn parse(s: &str) -> anyhow::Result<Cut> {
        let bad = || {
            format!(
                "{s:?} names no part of the network: write host:NAME, site:NAME or link:SITE-SITE"
            )
        };
        let (kind, rest) = s.split_once(':').with_context(bad)?;
        Ok(match kind {
            "host" => Cut::Host(rest.to_string()),
            "site" => Cut::Site(rest.to_string()),
            "link" => {
                let (a, b) = rest.split_once('-').with_context(bad)?;
                Cut::Between(a.to_string(), b.to_string())
            }
            _ => bail!(bad()),
        })
    }
}

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cut::Host(h) => write!(f, "host:{h}"),
            Cut::Site(s) => write!(f, "site:{s}"),
            Cut::Between(a, b) => write!(f, "link:{a}-{b}"),
        }
    }
}

/// A link whose rate a `slow` fault changes: a host's link or a site's uplink.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LinkRef {
    Host(String),
    Site(String),
}

impl LinkRef {
    pub fn parse(s: &str) -> anyhow::Result<LinkRef> {
        match s.split_once(':') {
            Some(("host", h)) => Ok(LinkRef::Host(h.to_string())),
            Some(("site", x)) => Ok(LinkRef::Site(x.to_string())),
            _ => bail!("{s:?} names no link: write host:NAME (its link) or site:NAME (its uplink)"),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum FaultKind {
    /// Cut off for `for_s` seconds, or until the run ends.
    Partition { cut: Cut, for_s: Option<f64> },
    /// The link runs at `rate` from then on.
    Slow { link: LinkRef, rate: Rate },
}

/// One scheduled fault, `at_s` seconds after the grid is up.
#[derive(Clone, Debug, PartialEq)]
pub struct Fault {
    pub at_s: f64,
    pub kind: FaultKind,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFault {
    at_s: f64,
    #[serde(default)]
    partition: Option<String>,
    #[serde(default)]
    for_s: Option<f64>,
    #[serde(default)]
    slow: Option<String>,
    #[serde(default)]
    rate: Option<Rate>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTopology {
    name: String,
    #[serde(default)]
    site: Vec<Site>,
    #[serde(default)]
    host: Vec<Host>,
    #[serde(default)]
    fault: Vec<RawFault>,
}

/// A checked topology: names unique and short, every host in a known site, faults naming
/// what exists.
#[derive(Clone, Debug)]
pub struct Topology {
    /// Prefixes every namespace the bed creates (`gw.<name>.<host>`), so `testbed down`
    /// finds leftovers of a bed by its file.
    pub name: String,
    pub sites: Vec<Site>,
    pub hosts: Vec<Host>,
    pub faults: Vec<Fault>,
}

/// Host and site names become parts of namespace names and interface names.
fn check_name(what: &str, n: &str) -> anyhow::Result<()> {
    ensure!(
        !n.is_empty()
            && n.len() <= 24
            && n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
        "{what} name {n:?}: use 1 to 24 of a-z, 0-9 and _ (it becomes part of namespace names; \
         '-' separates the two sites of a link)"
    );
    Ok(())
}

impl Topology {
    pub fn load(path: &Path) -> anyhow::Result<Topology> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the topology {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("in the topology {}", path.display()))
    }

    pub fn parse(text: &str) -> anyhow::Result<Topology> {
        let raw: RawTopology = toml::from_str(text)?;
        check_name("the topology's", &raw.name)?;
        ensure!(
            !raw.site.is_empty(),
            "a topology needs at least one [[site]]"
        );
        ensure!(raw.site.len() <= 250, "at most 250 sites");
        let mut seen = HashSet::new();
        for s in &raw.site {
            check_name("site", &s.name)?;
            ensure!(
                seen.insert(s.name.clone()),
                "site {:?} is given twice",
                s.name
            );
        }
        let mut hosts_seen = HashSet::new();
        for h in &raw.host {
            check_name("host", &h.name)?;
            ensure!(
                hosts_seen.insert(h.name.clone()),
                "host {:?} is given twice",
                h.name
            );
            ensure!(
                seen.contains(&h.site),
                "host {:?} is in site {:?}, which no [[site]] defines",
                h.name,
                h.site
            );
        }
        for s in &raw.site {
            let n = raw.host.iter().filter(|h| h.site == s.name).count();
            ensure!(n <= 250, "site {:?} has {n} hosts; at most 250", s.name);
        }
        let agents = raw.host.iter().filter(|h| h.role == Role::Agent).count();
        ensure!(
            agents <= 1,
            "{agents} hosts have role = \"agent\"; a grid has one"
        );
        let mut topo = Topology {
            name: raw.name,
            sites: raw.site,
            hosts: raw.host,
            faults: Vec::new(),
        };
        for f in raw.fault {
            topo.faults.push(topo.check_fault(f)?);
        }
        topo.faults.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
        Ok(topo)
    }

    fn check_fault(&self, f: RawFault) -> anyhow::Result<Fault> {
        ensure!(
            f.at_s.is_finite() && f.at_s >= 0.0,
            "a fault's at_s must be a time in seconds from the start, not {}",
            f.at_s
        );
        let kind = match (f.partition, f.slow) {
            (Some(p), None) => {
                ensure!(
                    f.rate.is_none(),
                    "a partition takes no rate (that is `slow`)"
                );
                let cut = Cut::parse(&p)?;
                self.check_cut(&cut)?;
                if let Some(d) = f.for_s {
                    ensure!(d > 0.0 && d.is_finite(), "for_s must be positive, not {d}");
                }
                FaultKind::Partition {
                    cut,
                    for_s: f.for_s,
                }
            }
            (None, Some(l)) => {
                let link = LinkRef::parse(&l)?;
                self.check_link(&link)?;
                let rate = f.rate.context("a `slow` fault needs rate = \"…bit\"")?;
                ensure!(
                    f.for_s.is_none(),
                    "a `slow` fault lasts; give a second one to undo it"
                );
                FaultKind::Slow { link, rate }
            }
            _ => bail!("a [[fault]] has exactly one of partition = \"…\" or slow = \"…\""),
        };
        Ok(Fault { at_s: f.at_s, kind })
    }

    /// The same topology under another name: its namespaces then differ from those of any
    /// bed of the file's own name (two runs of one file side by side, a test beside a user).
    pub fn renamed(mut self, name: &str) -> anyhow::Result<Topology> {
        check_name("the topology's", name)?;
        self.name = name.to_string();
        Ok(self)
    }

    pub fn check_cut(&self, cut: &Cut) -> anyhow::Result<()> {
        match cut {
            Cut::Host(h) => {
                self.host(h)?;
            }
            Cut::Site(s) => {
                self.site_index(s)?;
            }
            Cut::Between(a, b) => {
                self.site_index(a)?;
                self.site_index(b)?;
                ensure!(a != b, "link:{a}-{b} joins a site to itself");
            }
        }
        Ok(())
    }

    pub fn check_link(&self, link: &LinkRef) -> anyhow::Result<()> {
        match link {
            LinkRef::Host(h) => self.host(h).map(|_| ()),
            LinkRef::Site(s) => self.site_index(s).map(|_| ()),
        }
    }

    pub fn host(&self, name: &str) -> anyhow::Result<&Host> {
        self.hosts.iter().find(|h| h.name == name).with_context(|| {
            format!(
                "no host {name:?} in topology {:?} (hosts: {})",
                self.name,
                self.hosts
                    .iter()
                    .map(|h| h.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
    }

    /// 1-based: the third byte of the site's addresses.
    pub fn site_index(&self, name: &str) -> anyhow::Result<usize> {
        self.sites
            .iter()
            .position(|s| s.name == name)
            .map(|i| i + 1)
            .with_context(|| format!("no site {name:?} in topology {:?}", self.name))
    }

    /// 1-based within its site: the last byte of its address.
    fn host_index(&self, name: &str) -> anyhow::Result<usize> {
        let h = self.host(name)?;
        Ok(self
            .hosts
            .iter()
            .filter(|x| x.site == h.site)
            .position(|x| x.name == name)
            .expect("the host is in its own site")
            + 1)
    }

    /// The host's address, which its daemons listen on and advertise.
    pub fn addr(&self, host: &str) -> anyhow::Result<String> {
        let h = self.host(host)?;
        let [a, b] = HOST_NET;
        Ok(format!(
            "{a}.{b}.{}.{}",
            self.site_index(&h.site)?,
            self.host_index(host)?
        ))
    }

    /// The rate data moving from `a` to `b` gets: the slowest link on the way.
    pub fn path_rate(&self, a: &str, b: &str) -> anyhow::Result<Rate> {
        let (ha, hb) = (self.host(a)?, self.host(b)?);
        let mut r = ha.link.min(hb.link);
        if ha.site != hb.site {
            for s in [&ha.site, &hb.site] {
                r = r.min(self.sites[self.site_index(s)? - 1].uplink);
            }
        }
        Ok(r)
    }

    pub fn with_role(&self, role: Role) -> impl Iterator<Item = &Host> {
        self.hosts.iter().filter(move |h| h.role == role)
    }

    /// Whether any link asks for a delay (emulated only where the kernel has netem).
    pub fn wants_latency(&self) -> bool {
        self.hosts.iter().any(|h| h.latency_ms.is_some())
            || self.sites.iter().any(|s| s.latency_ms.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_SITES: &str = r#"
name = "t"
[[site]]
name = "a"
uplink = "100mbit"
[[site]]
name = "b"
uplink = "50mbit"
[[host]]
name = "agent"
site = "a"
link = "1gbit"
role = "agent"
[[host]]
name = "a1"
site = "a"
link = "1gbit"
role = "server"
[[host]]
name = "b1"
site = "b"
link = "20mbit"
role = "server"
[[fault]]
at_s = 3
partition = "link:a-b"
for_s = 2
[[fault]]
at_s = 1
slow = "site:b"
rate = "10mbit"
"#;

    #[test]
    fn rates_parse_as_tc_writes_them() {
        assert_eq!(Rate::parse("1gbit").unwrap(), Rate(1_000_000_000));
        assert_eq!(Rate::parse("20mbit").unwrap(), Rate(20_000_000));
        assert_eq!(Rate::parse("2.5 Mbit").unwrap(), Rate(2_500_000));
        assert!(
            Rate::parse("100")
                .unwrap_err()
                .to_string()
                .contains("no unit")
        );
        assert!(Rate::parse("fastmbit").is_err());
        assert!(Rate::parse("0mbit").is_err());
    }

    #[test]
    fn a_two_site_topology_gets_addresses_and_path_rates() {
        let t = Topology::parse(TWO_SITES).unwrap();
        assert_eq!(t.addr("agent").unwrap(), "10.201.1.1");
        assert_eq!(t.addr("a1").unwrap(), "10.201.1.2");
        assert_eq!(t.addr("b1").unwrap(), "10.201.2.1");
        assert_eq!(t.path_rate("agent", "a1").unwrap(), Rate(1_000_000_000));
        assert_eq!(t.path_rate("a1", "b1").unwrap(), Rate(20_000_000));
        // The faults come sorted by time.
        assert_eq!(t.faults[0].at_s, 1.0);
        assert_eq!(
            t.faults[1].kind,
            FaultKind::Partition {
                cut: Cut::Between("a".into(), "b".into()),
                for_s: Some(2.0)
            }
        );
    }

    #[test]
    fn mistakes_are_named() {
        let bad_site = TWO_SITES.replace(
            "site = \"b\"\nlink = \"20mbit\"",
            "site = \"c\"\nlink = \"20mbit\"",
        );
        let e = format!("{:#}", Topology::parse(&bad_site).unwrap_err());
        assert!(e.contains("site \"c\", which no [[site]] defines"), "{e}");

        let dup = TWO_SITES.replace("name = \"b1\"", "name = \"a1\"");
        let e = format!("{:#}", Topology::parse(&dup).unwrap_err());
        assert!(e.contains("host \"a1\" is given twice"), "{e}");

        let cut = TWO_SITES.replace("link:a-b", "host:nowhere");
        let e = format!("{:#}", Topology::parse(&cut).unwrap_err());
        assert!(e.contains("no host \"nowhere\""), "{e}");

        let name = TWO_SITES.replace("name = \"t\"", "name = \"Big Name\"");
        assert!(Topology::parse(&name).is_err());

        let both = TWO_SITES.replace("for_s = 2", "for_s = 2\nslow = \"site:a\"");
        let e = format!("{:#}", Topology::parse(&both).unwrap_err());
        assert!(e.contains("exactly one of"), "{e}");

        let unknown = TWO_SITES.replace("uplink = \"50mbit\"", "uplink = \"50mbit\"\nspeed = 3");
        assert!(Topology::parse(&unknown).is_err());

        let two_agents = TWO_SITES.replace("role = \"server\"", "role = \"agent\"");
        assert!(Topology::parse(&two_agents).is_err());
    }

    #[test]
    fn cuts_parse_from_their_written_form() {
        assert_eq!(Cut::parse("host:a1").unwrap(), Cut::Host("a1".into()));
        assert_eq!(Cut::parse("site:b").unwrap(), Cut::Site("b".into()));
        assert_eq!(
            Cut::parse("link:a-b").unwrap(),
            Cut::Between("a".into(), "b".into())
        );
        assert!(Cut::parse("router:a").is_err());
        assert!(Cut::parse("link:ab").is_err());
        assert_eq!(Cut::parse("link:a-b").unwrap().to_string(), "link:a-b");
    }
}
