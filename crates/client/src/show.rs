//! What `gridwise status` and `gridwise services` print, for people: one renderer, so the
//! command line and `python -m gridwise` show the same tables.

use gridwise_proto::{AgentStatus, ServerState, ServiceSummary};
use std::fmt::Write;

/// The grid as the agent sees it: a line on the agent (and on its store when writes fail or
/// wait), then a row per server.
pub fn status_table(st: &AgentStatus) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "agent: policy {}, up {:.0}s, {} call(s) ranked, {} server(s)",
        st.policy,
        st.uptime_s,
        st.ranked,
        st.servers.len()
    );
    let disk = &st.storage;
    if !disk.ok || disk.pending_writes > 0 || disk.dropped_writes > 0 {
        let _ = writeln!(
            out,
            "STORAGE: {} — {} write(s) waiting to be retried, {} given up{}",
            if disk.ok { "writing" } else { "FAILING" },
            disk.pending_writes,
            disk.dropped_writes,
            disk.last_error
                .as_deref()
                .map(|e| format!("; last error: {e}"))
                .unwrap_or_default()
        );
    }
    if let Some(o) = &st.others {
        let _ = writeln!(
            out,
            "other agents' calls: {:.0}/s reaching servers, each unseen here for {} after its ranking ({:.2} on their way, unseen, on average)",
            o.arrivals_per_s,
            o.unseen_for_s
                .map_or("(not measured yet)".to_string(), |s| format!(
                    "{:.2} ms",
                    s * 1e3
                )),
            o.unseen_calls()
        );
    }
    // The speed is the start-up calibration (a dgemm), which every service without a rate
    // of its own is priced by: a fact of the host, whatever it offers.
    let _ = writeln!(
        out,
        "{:<16} {:<22} {:<5} {:>5} {:>7} {:>9} {:>7} {:>8} {:>13}  services",
        "server",
        "address",
        "state",
        "slots",
        "pending",
        "completed",
        "running",
        "heard",
        "speed Gop/s"
    );
    for s in &st.servers {
        let _ = writeln!(
            out,
            "{:<16} {:<22} {:<5} {:>5} {:>7} {:>9} {:>7} {:>7.1}s {:>13.2}  {}",
            s.name,
            s.addr,
            if s.state == ServerState::Up {
                "up"
            } else {
                "DOWN"
            },
            s.slots,
            s.pending,
            s.completed,
            s.load.running,
            s.last_heard_s,
            s.default_rate / 1e9,
            s.services.join(",")
        );
    }
    let hidden: usize = st.servers.iter().map(|s| s.not_offered.len()).sum();
    if hidden > 0 {
        let _ = writeln!(
            out,
            "{hidden} routine(s) described but not offered: `gridwise services --describe` says which and why"
        );
    }
    out
}

/// The status as `--json` gives it: plain names and numbers, units in the keys.
pub fn status_json(st: &AgentStatus) -> serde_json::Value {
    serde_json::json!({
        "policy": st.policy.as_str(),
        "uptime_s": st.uptime_s,
        "ranked": st.ranked,
        "storage": {
            "ok": st.storage.ok, "last_error": st.storage.last_error,
            "pending_writes": st.storage.pending_writes, "dropped_writes": st.storage.dropped_writes,
        },
        "others": st.others.map(|o| serde_json::json!({
            "arrivals_per_s": o.arrivals_per_s, "unseen_for_s": o.unseen_for_s,
            "unseen_calls": o.unseen_calls(),
        })),
        "servers": st.servers.iter().map(|s| serde_json::json!({
            "id": s.id.to_string(), "name": s.name, "addr": s.addr,
            "state": if s.state == ServerState::Up { "up" } else { "down" },
            "slots": s.slots, "pending": s.pending, "completed": s.completed,
            "running": s.load.running, "queued": s.load.queued, "loadavg_1m": s.load.loadavg_1m,
            "last_heard_s": s.last_heard_s, "default_rate": s.default_rate, "services": s.services,
            "not_offered": s.not_offered.iter().map(|n| serde_json::json!({
                "service": n.service, "file": n.file, "why": n.why,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// Every service with its signature, how many live servers offer it and its line of doc.
pub fn services_table(services: &[ServiceSummary]) -> String {
    let mut out = String::new();
    for s in services {
        let _ = writeln!(
            out,
            "{}  [{} server(s) up]",
            s.desc.signature(),
            s.servers_up
        );
        if !s.desc.doc.is_empty() {
            let _ = writeln!(out, "    {}", s.desc.doc);
        }
    }
    out
}

/// [`services_table`] with each service's full description (arguments and what they are,
/// sizes, work, memory), then a warning for every routine a server's description files
/// describe but that server does not offer, and why.
pub fn services_described(services: &[ServiceSummary], st: &AgentStatus) -> String {
    let mut out = String::new();
    for s in services {
        let d = &s.desc;
        let _ = writeln!(out, "{}  [{} server(s) up]", d.name, s.servers_up);
        if !d.doc.is_empty() {
            let _ = writeln!(out, "    {}", d.doc);
        }
        for a in &d.args {
            let doc = if a.doc.is_empty() {
                String::new()
            } else {
                format!("  {}", a.doc)
            };
            let _ = writeln!(out, "    {:<5} {}: {}{doc}", a.mode.as_str(), a.name, a.ty);
        }
        if !d.size_params.is_empty() {
            let _ = writeln!(out, "    sizes: {}", d.size_params.join(", "));
        }
        if let Some(c) = &d.complexity {
            let _ = writeln!(out, "    work: {c} operations");
        }
        if let Some(t) = &d.duration {
            let _ = writeln!(out, "    time: {t} s on any server");
        }
        if let Some(m) = &d.memory {
            let _ = writeln!(out, "    memory: {m} bytes");
        }
    }
    let warnings: Vec<String> = st
        .servers
        .iter()
        .flat_map(|s| {
            s.not_offered.iter().map(move |n| {
                format!(
                    "warning: server {} describes `{}` ({}) but does not offer it: {}",
                    s.name, n.service, n.file, n.why
                )
            })
        })
        .collect();
    if !warnings.is_empty() {
        out.push('\n');
        for w in warnings {
            let _ = writeln!(out, "{w}");
        }
    }
    out
}
