//! `gridwise status`: the grid as the agent sees it, and for a call profile, every candidate's
//! ETC breakdown (why the agent would choose what it chooses).

use gridwise_client::{Client, show};
use gridwise_predict::EtcSpread;
use gridwise_proto::{Candidate, RankOptions};
use serde_json::json;

/// Prints servers, their state, services and queues.
pub fn print_status(client: &Client, as_json: bool) -> anyhow::Result<()> {
    let st = client.status()?;
    if as_json {
        println!("{}", show::status_json(&st));
    } else {
        print!("{}", show::status_table(&st));
    }
    Ok(())
}

/// Prints every service with its signature; with `describe`, its whole description and the
/// routines servers describe but do not offer.
pub fn print_services(client: &Client, describe: bool) -> anyhow::Result<()> {
    let list = client.list_services()?;
    if describe {
        print!("{}", show::services_described(&list, &client.status()?));
    } else {
        print!("{}", show::services_table(&list));
    }
    Ok(())
}

/// Prints every candidate's ETC breakdown for a call of `service` with these sizes.
pub fn print_explain(
    client: &Client,
    service: &str,
    sizes: &[(String, i64)],
    options: RankOptions,
    as_json: bool,
) -> anyhow::Result<()> {
    let desc = client.describe(service)?;
    let profile = desc.profile_for_sizes(sizes).map_err(anyhow::Error::msg)?;
    let cands = client.explain(profile.clone(), options)?;
    if as_json {
        println!("{}", explain_json(&cands));
        return Ok(());
    }
    let sizes: Vec<String> = profile
        .sizes
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    println!(
        "{service}({}): {} in, {} out; candidates best first",
        sizes.join(", "),
        human_bytes(profile.in_bytes),
        human_bytes(profile.out_bytes)
    );
    println!(
        "{:<16} {:>10} {:>24} {:>10} {:>10} {:>10} {:>10} {:>5}  compute from",
        "server", "ETC s", "90% interval s", "queue s", "in s", "compute s", "out s", "cpu"
    );
    for c in &cands {
        let e = &c.etc;
        let (lo, hi) = e.interval90_s();
        let cpu = e
            .cpu_available
            .map_or("-".to_string(), |a| format!("{:.0}%", a * 100.0));
        println!(
            "{:<16} {:>10.6} {:>10.6} to {:>10.6} {:>10.6} {:>10.6} {:>10.6} {:>10.6} {:>5}  {}",
            c.name,
            e.total_s(),
            lo,
            hi,
            e.queue_wait_s,
            e.transfer_in_s,
            e.compute_s,
            e.transfer_out_s,
            cpu,
            e.compute_source
        );
    }
    Ok(())
}

fn explain_json(cands: &[Candidate]) -> serde_json::Value {
    json!(
        cands
            .iter()
            .map(|c| json!({
                "server": c.name, "addr": c.addr, "etc_s": c.etc.total_s(),
                "queue_wait_s": c.etc.queue_wait_s, "transfer_in_s": c.etc.transfer_in_s,
                "compute_s": c.etc.compute_s, "transfer_out_s": c.etc.transfer_out_s,
                "compute_source": c.etc.compute_source.to_string(),
                "etc_sd_s": c.etc.total_sd_s(),
                "interval90_s": <[f64; 2]>::from(c.etc.interval90_s()),
                "queue_wait_sd_s": c.etc.queue_wait_sd_s, "transfer_sd_s": c.etc.transfer_sd_s,
                "compute_sd_s": c.etc.compute_sd_s, "cpu_available": c.etc.cpu_available,
                "overhead_s": c.etc.overhead_s, "overhead_sd_s": c.etc.overhead_sd_s,
            }))
            .collect::<Vec<_>>()
    )
}

/// Prints the links the servers measured to each other.
pub fn print_links(client: &Client, as_json: bool) -> anyhow::Result<()> {
    let links = client.link_matrix()?;
    if as_json {
        let rows: Vec<_> = links
            .iter()
            .map(|l| {
                json!({"from": l.from, "to": l.sample.to, "latency_s": l.sample.latency_s,
                       "bandwidth_bytes_per_s": l.sample.bandwidth_bytes_per_s, "age_s": l.age_s})
            })
            .collect();
        println!("{}", json!(rows));
        return Ok(());
    }
    if links.is_empty() {
        println!(
            "no links measured yet: servers probe each other every link_probe_s (default 60 s)"
        );
        return Ok(());
    }
    println!(
        "{:<22} {:<22} {:>12} {:>14} {:>8}",
        "from", "to", "latency µs", "bandwidth MB/s", "age s"
    );
    for l in &links {
        println!(
            "{:<22} {:<22} {:>12.1} {:>14.1} {:>8.1}",
            l.from,
            l.sample.to,
            l.sample.latency_s * 1e6,
            l.sample.bandwidth_bytes_per_s / 1e6,
            l.age_s
        );
    }
    Ok(())
}

/// Bytes with a binary unit.
pub fn human_bytes(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = b as f64;
    let mut i = 0;
    while x >= 1024.0 && i + 1 < U.len() {
        x /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{x:.1} {}", U[i])
    }
}
