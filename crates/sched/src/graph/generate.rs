//! Graph and ETC generators for tests and benchmarks. All randomness comes from a seed through a
//! SplitMix64 stream defined here, so a seed means the same graph on every machine and every
//! version (a library RNG may change its stream between releases).

use super::dag::{Task, TaskGraph, TaskIdx};
use super::platform::EtcMatrix;

/// SplitMix64 (Steele, Lea & Flood 2014): tiny, fast, and good enough for test data.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A stream from `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.unit() * n as f64) as usize % n.max(1)
    }
}

/// Operations of a generated task: 1–10 Gflop, so ETCs come out in seconds at Gflop/s rates.
const WORK: (f64, f64) = (1e9, 1e10);
/// Bytes on a generated edge: 100 kB – 10 MB.
const BYTES: (f64, f64) = (1e5, 1e7);

/// A random layered DAG: `tasks` tasks in layers of `width`; each task depends on each task of
/// the previous layer with probability `edge_prob`, and on at least one of them.
pub fn layered(tasks: usize, width: usize, edge_prob: f64, seed: u64) -> TaskGraph {
    let width = width.max(1);
    let mut rng = SplitMix64::new(seed);
    let mut g = TaskGraph::new();
    for i in 0..tasks {
        g.add_task(Task::new(
            format!("t{i}"),
            format!("svc{}", i % 4),
            rng.uniform(WORK.0, WORK.1),
        ));
    }
    for layer_start in (width..tasks).step_by(width) {
        let prev = layer_start - width..layer_start;
        for t in layer_start..(layer_start + width).min(tasks) {
            let mut any = false;
            for p in prev.clone() {
                if rng.unit() < edge_prob {
                    add(&mut g, p, t, rng.uniform(BYTES.0, BYTES.1) as u64);
                    any = true;
                }
            }
            if !any {
                let p = prev.start + rng.below(width);
                add(&mut g, p, t, rng.uniform(BYTES.0, BYTES.1) as u64);
            }
        }
    }
    g
}

/// `tasks` independent tasks with random work.
pub fn bag(tasks: usize, seed: u64) -> TaskGraph {
    let mut rng = SplitMix64::new(seed);
    let mut g = TaskGraph::new();
    for i in 0..tasks {
        g.add_task(Task::new(
            format!("t{i}"),
            "svc",
            rng.uniform(WORK.0, WORK.1),
        ));
    }
    g
}

/// Adds an edge the generators know is valid (both ends exist, distinct, forward in index).
fn add(g: &mut TaskGraph, from: TaskIdx, to: TaskIdx, bytes: u64) {
    debug_assert!(from < to && to < g.len());
    if g.add_edge(from, to, bytes).is_err() {
        unreachable!("generated edge {from} -> {to} is forward and in range");
    }
}

/// Tiled right-looking Cholesky of a `tiles` × `tiles` matrix of `tile` × `tile` doubles:
/// for k: potrf(k); trsm(i,k) for i > k; syrk(i,k) for i > k; gemm(i,j,k) for i > j > k.
/// Each task depends on the last writer of every tile it reads or updates.
pub fn cholesky(tiles: usize, tile: usize) -> TaskGraph {
    let b = tile as f64;
    let tile_bytes = (tile * tile * 8) as u64;
    let mut g = TaskGraph::new();
    // last[i * tiles + j] = task that last wrote tile (i, j), i >= j.
    let mut last: Vec<Option<TaskIdx>> = vec![None; tiles * tiles];
    let at = |i: usize, j: usize| i * tiles + j;
    let task = |g: &mut TaskGraph, name: String, service: &str, work: f64, mem_tiles: u64| {
        g.add_task(Task::new(name, service, work).with_mem(mem_tiles * tile_bytes))
    };
    let dep = |g: &mut TaskGraph, from: Option<TaskIdx>, to: TaskIdx| {
        if let Some(f) = from {
            add(g, f, to, tile_bytes);
        }
    };
    for k in 0..tiles {
        let potrf = task(&mut g, format!("potrf({k})"), "dpotrf", b * b * b / 3.0, 1);
        dep(&mut g, last[at(k, k)], potrf);
        last[at(k, k)] = Some(potrf);
        for i in k + 1..tiles {
            let trsm = task(&mut g, format!("trsm({i},{k})"), "dtrsm", b * b * b, 2);
            dep(&mut g, Some(potrf), trsm);
            dep(&mut g, last[at(i, k)], trsm);
            last[at(i, k)] = Some(trsm);
        }
        for i in k + 1..tiles {
            let syrk = task(&mut g, format!("syrk({i},{k})"), "dsyrk", b * b * b, 2);
            dep(&mut g, last[at(i, k)], syrk);
            dep(&mut g, last[at(i, i)], syrk);
            last[at(i, i)] = Some(syrk);
            for j in k + 1..i {
                let gemm = task(
                    &mut g,
                    format!("gemm({i},{j},{k})"),
                    "dgemm",
                    2.0 * b * b * b,
                    3,
                );
                dep(&mut g, last[at(i, k)], gemm);
                dep(&mut g, last[at(j, k)], gemm);
                dep(&mut g, last[at(i, j)], gemm);
                last[at(i, j)] = Some(gemm);
            }
        }
    }
    g
}

/// Hydropad (seed 003 §3.3): `init`, then `iterations` of `gravity` → (`darkmatter` ∥
/// `barmatter`), each gravity needing both halves of the previous step, each half its own state
/// from the previous step. `nx` grid cells and `np` particles per side; work and memory are
/// illustrative (barmatter computes most, darkmatter holds most memory), the shape is the thesis's.
pub fn hydropad(iterations: usize, nx: usize, np: usize) -> TaskGraph {
    let cells = (nx * nx * nx) as f64;
    let particles = (np * np * np) as f64;
    let grid_bytes = (cells * 8.0) as u64;
    let particle_bytes = (particles * 6.0 * 8.0) as u64;
    let mut g = TaskGraph::new();
    let init = g.add_task(
        Task::new("init", "init", 10.0 * cells + 10.0 * particles)
            .with_mem(4 * grid_bytes + particle_bytes),
    );
    let (mut dark, mut bar) = (init, init);
    for it in 1..=iterations {
        let gravity = g.add_task(
            Task::new(
                format!("gravity[{it}]"),
                "gravity",
                15.0 * cells * (nx.max(2) as f64).log2(),
            )
            .with_mem(4 * grid_bytes),
        );
        add(&mut g, dark, gravity, grid_bytes);
        if bar != dark {
            add(&mut g, bar, gravity, grid_bytes);
        }
        let d = g.add_task(
            Task::new(
                format!("darkmatter[{it}]"),
                "darkmatter",
                60.0 * particles + 40.0 * cells,
            )
            .with_mem(4 * grid_bytes + particle_bytes),
        );
        let b = g.add_task(
            Task::new(format!("barmatter[{it}]"), "barmatter", 400.0 * cells)
                .with_mem(5 * grid_bytes),
        );
        add(&mut g, gravity, d, 3 * grid_bytes);
        add(&mut g, gravity, b, 3 * grid_bytes);
        // Particle and gas state carry over from the previous step (from init at the start).
        add(&mut g, dark, d, particle_bytes);
        add(&mut g, bar, b, 5 * grid_bytes);
        (dark, bar) = (d, b);
    }
    g
}

/// An ETC matrix for unrelated servers: server s has a base rate drawn in [1, `spread`] Gflop/s,
/// and each entry is work ÷ rate times a per-entry factor in [0.5, 1.5] (so no server is fastest
/// for every task).
pub fn random_etc(graph: &TaskGraph, servers: usize, spread: f64, seed: u64) -> EtcMatrix {
    let mut rng = SplitMix64::new(seed ^ 0x5EED_E7C0);
    let rates: Vec<f64> = (0..servers)
        .map(|_| 1e9 * rng.uniform(1.0, spread.max(1.0)))
        .collect();
    let values: Vec<f64> = (0..graph.len() * servers)
        .map(|i| {
            let t = gridwise_predict::constant_speed_s(
                graph.task(i / servers).work,
                rates[i % servers],
            );
            t * rng.uniform(0.5, 1.5)
        })
        .collect();
    match EtcMatrix::new(graph.len(), servers, values) {
        Ok(e) => e,
        Err(e) => unreachable!("generated ETCs are finite and positive: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(g: &TaskGraph, service: &str) -> usize {
        g.tasks().filter(|t| t.service == service).count()
    }

    #[test]
    fn cholesky_task_counts() {
        for t in [1usize, 2, 3, 5, 8] {
            let g = cholesky(t, 64);
            assert_eq!(count(&g, "dpotrf"), t);
            assert_eq!(count(&g, "dtrsm"), t * (t - 1) / 2);
            assert_eq!(count(&g, "dsyrk"), t * (t - 1) / 2);
            assert_eq!(count(&g, "dgemm"), t * (t - 1) * (t.saturating_sub(2)) / 6);
            assert!(g.topo_order().is_ok());
        }
        // T = 3: potrf(0) -> trsm(1,0), trsm(2,0); gemm(2,1,0) needs both trsms.
        let g = cholesky(3, 1);
        let name = |i: usize| g.task(i).name.clone();
        let preds = |n: &str| {
            let i = (0..g.len()).find(|&i| g.task(i).name == n).unwrap();
            let mut p: Vec<String> = g.edges().filter(|e| e.1 == i).map(|e| name(e.0)).collect();
            p.sort();
            p
        };
        assert_eq!(preds("gemm(2,1,0)"), ["trsm(1,0)", "trsm(2,0)"]);
        assert_eq!(preds("potrf(1)"), ["syrk(1,0)"]);
        assert_eq!(preds("trsm(2,1)"), ["gemm(2,1,0)", "potrf(1)"]);
        assert_eq!(preds("potrf(2)"), ["syrk(2,1)"]);
        assert_eq!(preds("syrk(2,1)"), ["syrk(2,0)", "trsm(2,1)"]);
    }

    #[test]
    fn hydropad_shape() {
        let g = hydropad(3, 32, 32);
        assert_eq!(g.len(), 1 + 3 * 3);
        assert_eq!(count(&g, "gravity"), 3);
        let order = g.topo_order().unwrap();
        assert_eq!(g.task(order[0]).name, "init");
        // gravity[2] waits for both halves of step 1.
        let gravity2 = (0..g.len())
            .find(|&i| g.task(i).name == "gravity[2]")
            .unwrap();
        assert_eq!(g.edges().filter(|e| e.1 == gravity2).count(), 2);
        let (d, b) = (g.task(2), g.task(3));
        assert!(d.mem_bytes > b.mem_bytes && b.work > d.work);
    }

    #[test]
    fn layered_is_seeded_and_every_later_task_has_an_input() {
        let a = layered(200, 10, 0.2, 7);
        let b = layered(200, 10, 0.2, 7);
        assert_eq!(a.edges().collect::<Vec<_>>(), b.edges().collect::<Vec<_>>());
        assert_ne!(
            a.edges().collect::<Vec<_>>(),
            layered(200, 10, 0.2, 8).edges().collect::<Vec<_>>()
        );
        let adj = a.adjacency().unwrap();
        assert!((10..200).all(|t| !adj.preds(t).is_empty()));
        assert!((0..10).all(|t| adj.preds(t).is_empty()));
        assert!(bag(50, 1).is_bag());
    }
}
