//! The commands that build a test bed, cut and heal its links and change their rates, as
//! data: what `ip` and `tc` are asked, in which namespace. [`crate::Testbed`] runs them; the
//! tests read them without root.

use crate::topology::{BACKBONE_NET, Cut, HOST_NET, LinkRef, Rate, Topology};

/// One `ip`, `tc` or `sysctl` invocation; with a namespace, run inside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cmd {
    pub program: &'static str,
    pub netns: Option<String>,
    pub args: Vec<String>,
}

impl Cmd {
    fn new(program: &'static str, netns: Option<&str>, args: &[&str]) -> Cmd {
        Cmd {
            program,
            netns: netns.map(str::to_string),
            args: args.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// As a shell would read it, for error messages.
    pub fn shown(&self) -> String {
        let mut s = match &self.netns {
            Some(n) => format!("ip netns exec {n} {}", self.program),
            None => self.program.to_string(),
        };
        for a in &self.args {
            s.push(' ');
            s.push_str(a);
        }
        s
    }
}

/// Every namespace of topology `name` starts with this; `testbed down` deletes what does.
pub fn prefix(name: &str) -> String {
    format!("gw.{name}.")
}

pub fn host_ns(t: &Topology, host: &str) -> String {
    format!("{}h.{host}", prefix(&t.name))
}

pub fn router_ns(t: &Topology, site: &str) -> String {
    format!("{}r.{site}", prefix(&t.name))
}

pub fn core_ns(t: &Topology) -> String {
    format!("{}core", prefix(&t.name))
}

/// Every namespace the bed creates: the backbone, a router per site, one per host.
pub fn namespaces(t: &Topology) -> Vec<String> {
    let mut v = vec![core_ns(t)];
    v.extend(t.sites.iter().map(|s| router_ns(t, &s.name)));
    v.extend(t.hosts.iter().map(|h| host_ns(t, &h.name)));
    v
}

fn site_net(i: usize) -> String {
    let [a, b] = HOST_NET;
    format!("{a}.{b}.{i}.0/24")
}

fn router_lan_addr(i: usize) -> String {
    let [a, b] = HOST_NET;
    format!("{a}.{b}.{i}.254")
}

fn router_wan_addr(i: usize) -> String {
    let [a, b, c] = BACKBONE_NET;
    format!("{a}.{b}.{c}.{i}")
}

/// The two ends of a shaped link, `(namespace, interface)`: each shapes what it sends.
pub fn link_ends(t: &Topology, link: &LinkRef) -> anyhow::Result<[(String, String); 2]> {
    Ok(match link {
        LinkRef::Host(h) => {
            let host = t.host(h)?;
            let port = host_port(t, h)?;
            [
                (host_ns(t, h), "eth0".to_string()),
                (router_ns(t, &host.site), port),
            ]
        }
        LinkRef::Site(s) => {
            let i = t.site_index(s)?;
            [
                (router_ns(t, s), "wan".to_string()),
                (core_ns(t), format!("s{i}")),
            ]
        }
    })
}

/// The router's port to a host: `h<index within its site>`.
fn host_port(t: &Topology, host: &str) -> anyhow::Result<String> {
    let addr = t.addr(host)?;
    let last = addr.rsplit('.').next().expect("an address has dots");
    Ok(format!("h{last}"))
}

/// tbf's bucket: a millisecond of the rate, never less than a few full frames. A smaller one
/// loses tokens whenever the softirq that dequeues runs late, and a gigabit link then runs
/// well below its rate (0.25 ms gave 873 Mbit/s of raw TCP on this kind of machine).
fn burst_bytes(rate: Rate) -> u64 {
    ((rate.bytes_per_s() * 0.001) as u64).max(16 * 1024)
}

/// Shapes (or reshapes) one end of a link to `rate`, with `delay_ms` of netem under it where
/// the kernel has netem.
pub fn shape(ns: &str, dev: &str, rate: Rate, delay_ms: Option<f64>) -> Vec<Cmd> {
    let burst = burst_bytes(rate).to_string();
    let mut v = vec![Cmd::new(
        "tc",
        Some(ns),
        &[
            "qdisc",
            "replace",
            "dev",
            dev,
            "root",
            "handle",
            "1:",
            "tbf",
            "rate",
            &rate.tc(),
            "burst",
            &burst,
            "latency",
            "200ms",
        ],
    )];
    if let Some(d) = delay_ms {
        v.push(Cmd::new(
            "tc",
            Some(ns),
            &[
                "qdisc",
                "replace",
                "dev",
                dev,
                "parent",
                "1:1",
                "handle",
                "10:",
                "netem",
                "delay",
                &format!("{d}ms"),
            ],
        ));
    }
    v
}

/// Drops everything the end sends, without a word to either side: a cable pulled.
fn blackhole(ns: &str, dev: &str) -> Cmd {
    Cmd::new(
        "tc",
        Some(ns),
        &["qdisc", "replace", "dev", dev, "root", "blackhole"],
    )
}

/// A veth pair from `dev` (given `cidr`, up) in `ns` to `port` in `bridge_ns`, plugged into
/// its `bridge`: every link of the bed, a host's to its site and a site's to the backbone.
fn veth_to_bridge(
    (ns, dev, cidr): (&str, &str, &str),
    (bridge_ns, port, bridge): (&str, &str, &str),
) -> Vec<Cmd> {
    vec![
        Cmd::new(
            "ip",
            None,
            &[
                "link", "add", "name", dev, "netns", ns, "type", "veth", "peer", "name", port,
                "netns", bridge_ns,
            ],
        ),
        Cmd::new(
            "ip",
            Some(bridge_ns),
            &["link", "set", port, "master", bridge],
        ),
        Cmd::new("ip", Some(bridge_ns), &["link", "set", port, "up"]),
        Cmd::new("ip", Some(ns), &["addr", "add", cidr, "dev", dev]),
        Cmd::new("ip", Some(ns), &["link", "set", dev, "up"]),
    ]
}

/// A bridge named `name` in `ns`, up, with `cidr` on it when given.
fn bridge(ns: &str, name: &str, cidr: Option<&str>) -> Vec<Cmd> {
    let mut v = vec![Cmd::new(
        "ip",
        Some(ns),
        &["link", "add", "name", name, "type", "bridge"],
    )];
    if let Some(c) = cidr {
        v.push(Cmd::new("ip", Some(ns), &["addr", "add", c, "dev", name]));
    }
    v.push(Cmd::new("ip", Some(ns), &["link", "set", name, "up"]));
    v
}

/// What `up` runs after creating the namespaces: links, addresses, routes, shaping.
pub fn build(t: &Topology, netem: bool) -> anyhow::Result<Vec<Cmd>> {
    let mut v = Vec::new();
    let core = core_ns(t);
    let delay = |d: Option<f64>| if netem { d } else { None };
    for ns in namespaces(t) {
        v.push(Cmd::new("ip", Some(&ns), &["link", "set", "lo", "up"]));
    }
    v.extend(bridge(&core, "core", None));
    for (k, site) in t.sites.iter().enumerate() {
        let i = k + 1;
        let r = router_ns(t, &site.name);
        let wan = format!("{}/24", router_wan_addr(i));
        v.extend(veth_to_bridge(
            (&r, "wan", &wan),
            (&core, &format!("s{i}"), "core"),
        ));
        v.extend(bridge(
            &r,
            "lan",
            Some(&format!("{}/24", router_lan_addr(i))),
        ));
        v.push(Cmd::new(
            "sysctl",
            Some(&r),
            &["-qw", "net.ipv4.ip_forward=1"],
        ));
        for l in (0..t.sites.len()).filter(|&l| l != k) {
            v.push(Cmd::new(
                "ip",
                Some(&r),
                &[
                    "route",
                    "add",
                    &site_net(l + 1),
                    "via",
                    &router_wan_addr(l + 1),
                ],
            ));
        }
        for (ns, dev) in link_ends(t, &LinkRef::Site(site.name.clone()))? {
            v.extend(shape(&ns, &dev, site.uplink, delay(site.latency_ms)));
        }
    }
    for h in &t.hosts {
        let i = t.site_index(&h.site)?;
        let ns = host_ns(t, &h.name);
        let addr = format!("{}/24", t.addr(&h.name)?);
        v.extend(veth_to_bridge(
            (&ns, "eth0", &addr),
            (&router_ns(t, &h.site), &host_port(t, &h.name)?, "lan"),
        ));
        v.push(Cmd::new(
            "ip",
            Some(&ns),
            &["route", "add", "default", "via", &router_lan_addr(i)],
        ));
        for (ns, dev) in link_ends(t, &LinkRef::Host(h.name.clone()))? {
            v.extend(shape(&ns, &dev, h.link, delay(h.latency_ms)));
        }
    }
    Ok(v)
}

/// The delay a link asks for.
pub fn latency_ms(t: &Topology, link: &LinkRef) -> anyhow::Result<Option<f64>> {
    Ok(match link {
        LinkRef::Host(h) => t.host(h)?.latency_ms,
        LinkRef::Site(s) => t.sites[t.site_index(s)? - 1].latency_ms,
    })
}

/// The commands that cut (`heal == false`) or heal a part of the network. A cut link drops
/// what either end sends; healing shapes it again at `rate_of` its current rate.
pub fn cut(
    t: &Topology,
    what: &Cut,
    heal: bool,
    rate_of: &dyn Fn(&LinkRef) -> Rate,
    netem: bool,
) -> anyhow::Result<Vec<Cmd>> {
    t.check_cut(what)?;
    let link = match what {
        Cut::Host(h) => LinkRef::Host(h.clone()),
        Cut::Site(s) => LinkRef::Site(s.clone()),
        Cut::Between(a, b) => {
            let (i, j) = (t.site_index(a)?, t.site_index(b)?);
            let route = |r: &str, to: usize| {
                let net = site_net(to);
                if heal {
                    Cmd::new(
                        "ip",
                        Some(r),
                        &["route", "replace", &net, "via", &router_wan_addr(to)],
                    )
                } else {
                    Cmd::new("ip", Some(r), &["route", "replace", "blackhole", &net])
                }
            };
            return Ok(vec![route(&router_ns(t, a), j), route(&router_ns(t, b), i)]);
        }
    };
    let mut v = Vec::new();
    let delay = if netem { latency_ms(t, &link)? } else { None };
    for (ns, dev) in link_ends(t, &link)? {
        if heal {
            v.extend(shape(&ns, &dev, rate_of(&link), delay));
        } else {
            v.push(blackhole(&ns, &dev));
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topo() -> Topology {
        Topology::parse(
            r#"
name = "p"
[[site]]
name = "a"
uplink = "100mbit"
[[site]]
name = "b"
uplink = "100mbit"
[[host]]
name = "x"
site = "a"
link = "1gbit"
[[host]]
name = "y"
site = "b"
link = "20mbit"
latency_ms = 5
"#,
        )
        .unwrap()
    }

    #[test]
    fn every_link_is_shaped_at_both_ends() {
        let t = topo();
        let cmds = build(&t, false).unwrap();
        let tbf: Vec<_> = cmds
            .iter()
            .filter(|c| c.args.contains(&"tbf".to_string()))
            .map(|c| (c.netns.clone().unwrap(), c.args[3].clone()))
            .collect();
        // Two uplinks and two host links, each end shaping what it sends.
        assert_eq!(tbf.len(), 8, "{tbf:?}");
        assert!(tbf.contains(&("gw.p.h.y".into(), "eth0".into())));
        assert!(tbf.contains(&("gw.p.r.b".into(), "h1".into())));
        assert!(tbf.contains(&("gw.p.core".into(), "s2".into())));
        // No netem asked of a kernel without it.
        assert!(!cmds.iter().any(|c| c.args.contains(&"netem".to_string())));
        let with = build(&t, true).unwrap();
        assert_eq!(
            with.iter()
                .filter(|c| c.args.contains(&"netem".to_string()))
                .count(),
            2
        );
    }

    #[test]
    fn routers_know_every_other_site() {
        let t = topo();
        let cmds = build(&t, false).unwrap();
        let shown: Vec<String> = cmds.iter().map(Cmd::shown).collect();
        assert!(shown.contains(
            &"ip netns exec gw.p.r.a ip route add 10.201.2.0/24 via 10.200.0.2".to_string()
        ));
        assert!(
            shown.contains(
                &"ip netns exec gw.p.h.x ip route add default via 10.201.1.254".to_string()
            )
        );
    }

    #[test]
    fn a_cut_drops_silently_and_a_heal_restores_the_current_rate() {
        let t = topo();
        let slow = |_: &LinkRef| Rate(5_000_000);
        let c = cut(&t, &Cut::Host("y".into()), false, &slow, false).unwrap();
        assert_eq!(c.len(), 2);
        assert!(c.iter().all(|c| c.args.last().unwrap() == "blackhole"));
        let h = cut(&t, &Cut::Host("y".into()), true, &slow, false).unwrap();
        assert!(h.iter().all(|c| c.args.contains(&"5000000bit".to_string())));
        let between = cut(
            &t,
            &Cut::Between("a".into(), "b".into()),
            false,
            &slow,
            false,
        )
        .unwrap();
        assert_eq!(
            between[0].shown(),
            "ip netns exec gw.p.r.a ip route replace blackhole 10.201.2.0/24"
        );
        let healed = cut(
            &t,
            &Cut::Between("a".into(), "b".into()),
            true,
            &slow,
            false,
        )
        .unwrap();
        assert_eq!(
            healed[1].shown(),
            "ip netns exec gw.p.r.b ip route replace 10.201.1.0/24 via 10.200.0.1"
        );
    }
}
