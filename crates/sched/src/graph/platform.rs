//! What a mapper knows about the servers: each task's time on each server ([`EtcMatrix`]) and
//! what moving data between servers costs ([`CommModel`], in `comm`).

pub use super::comm::CommModel;
use super::dag::{TaskGraph, TaskIdx};
use super::shared_rows::SharedRows;
use thiserror::Error;

/// A graph, ETC matrix and communication model that disagree on how many tasks or servers
/// there are.
#[derive(Clone, Debug, Error, PartialEq)]
#[error(
    "shape mismatch: graph has {graph_tasks} tasks, ETC matrix {etc_tasks} x {etc_servers}, communication model {comm_servers} servers"
)]
pub struct ShapeMismatch {
    /// Tasks in the graph.
    pub graph_tasks: usize,
    /// Rows of the ETC matrix.
    pub etc_tasks: usize,
    /// Columns of the ETC matrix.
    pub etc_servers: usize,
    /// Servers in the communication model.
    pub comm_servers: usize,
}

/// Checks that the graph, the ETC matrix and the communication model agree.
pub fn check_shapes(
    graph: &TaskGraph,
    etc: &EtcMatrix,
    comm: &CommModel,
) -> Result<(), ShapeMismatch> {
    if etc.tasks() != graph.len() || comm.servers() != etc.servers() {
        return Err(ShapeMismatch {
            graph_tasks: graph.len(),
            etc_tasks: etc.tasks(),
            etc_servers: etc.servers(),
            comm_servers: comm.servers(),
        });
    }
    Ok(())
}

/// What was wrong with platform inputs.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum PlatformError {
    /// The number of values is not tasks × servers.
    #[error("ETC matrix for {tasks} tasks x {servers} servers needs {} values, got {got}", tasks * servers)]
    EtcShape {
        /// Rows.
        tasks: usize,
        /// Columns.
        servers: usize,
        /// Values given.
        got: usize,
    },
    /// An ETC entry that is negative or NaN (infeasible is `f64::INFINITY`, not NaN).
    #[error(
        "ETC of task {task} on server {server} is {value}; times must be >= 0 (infinity = cannot run)"
    )]
    EtcValue {
        /// Row.
        task: TaskIdx,
        /// Column.
        server: usize,
        value: f64,
    },
    /// Slot counts given for the wrong number of servers, or a server with no slot.
    #[error("slots: {reason}")]
    Slots { reason: String },
    /// Memory capacities or graph that do not match the matrix.
    #[error("memory exclusion: {reason}")]
    Memory { reason: String },
    /// Sites given for another number of servers.
    #[error("sites are given for {sites_for} servers, the links for {servers}")]
    Sites { sites_for: usize, servers: usize },
    /// A link with a negative/NaN latency or a non-positive/NaN bandwidth.
    #[error(
        "link {from} -> {to}: latency {latency_s} s and bandwidth {bandwidth} B/s; latency must be >= 0 and bandwidth > 0"
    )]
    Link {
        /// Sending server.
        from: usize,
        /// Receiving server.
        to: usize,
        /// Seconds, as given.
        latency_s: f64,
        /// Bytes/s, as given.
        bandwidth: f64,
    },
    /// A dispatch cost that is negative, infinite or NaN.
    #[error("dispatch cost per data edge {0} s; it must be finite and >= 0")]
    Dispatch(f64),
    /// A server index beyond the model's servers.
    #[error("server {server} does not exist; the model has {servers} servers")]
    UnknownServer {
        /// The bad index.
        server: usize,
        /// How many servers there are.
        servers: usize,
    },
}

/// Estimated time to compute every task on every server, in seconds; `f64::INFINITY` marks a
/// server that cannot run the task (say its memory does not fit). Also how many tasks each server
/// runs at once ("slots", 1 unless set), because the ETC is per task, not per server share.
///
/// Tasks with identical rows may share one stored row ([`from_shared_rows`](Self::from_shared_rows):
/// a large workload has far fewer distinct (service, size) pairs than tasks); every accessor
/// reads through the sharing, and [`set`](Self::set) copies a shared row before writing it.
#[derive(Clone, Debug)]
pub struct EtcMatrix {
    tasks: usize,
    servers: usize,
    /// Distinct rows, row-major: `values[r * servers + server]`.
    values: Vec<f64>,
    /// Per task, its row in `values`.
    rows: SharedRows,
    slots: Vec<usize>,
    // Per server, per slot: when it frees from work already queued (s from the graph's
    // start); empty when every slot is free at once.
    busy: Vec<Vec<f64>>,
}

/// Equal when every task's row, the slots and the busy times are: however rows are shared.
impl PartialEq for EtcMatrix {
    fn eq(&self, other: &Self) -> bool {
        self.tasks == other.tasks
            && self.servers == other.servers
            && self.slots == other.slots
            && self.busy == other.busy
            && (0..self.tasks).all(|t| self.row(t) == other.row(t))
    }
}

impl EtcMatrix {
    /// A matrix from row-major values (`values[task * servers + server]`).
    pub fn new(tasks: usize, servers: usize, values: Vec<f64>) -> Result<Self, PlatformError> {
        if values.len() != tasks * servers || u32::try_from(tasks).is_err() {
            return Err(PlatformError::EtcShape {
                tasks,
                servers,
                got: values.len(),
            });
        }
        Self::from_shared_rows(servers, values, (0..tasks as u32).collect())
    }

    /// A matrix whose task `t` has the row `row_of[t]` of `rows` (row-major, `servers` values
    /// per row): tasks with identical times everywhere share one row, so the matrix takes
    /// distinct rows × servers values rather than tasks × servers.
    pub fn from_shared_rows(
        servers: usize,
        rows: Vec<f64>,
        row_of: Vec<u32>,
    ) -> Result<Self, PlatformError> {
        let tasks = row_of.len();
        // With no servers every row is empty: as many as the tasks name.
        let stored = match servers {
            0 => row_of.iter().max().map_or(0, |&r| r as usize + 1),
            _ => rows.len() / servers,
        };
        let shape_error = || PlatformError::EtcShape {
            tasks,
            servers,
            got: rows.len(),
        };
        if rows.len() != stored * servers
            || u32::try_from(stored).is_err()
            || row_of.iter().any(|&r| r as usize >= stored)
        {
            return Err(shape_error());
        }
        if let Some(i) = rows.iter().position(|v| v.is_nan() || *v < 0.0) {
            let row = (i / servers) as u32;
            // A stored row no task reads is an error only for the values it would not show.
            if let Some(task) = row_of.iter().position(|&r| r == row) {
                return Err(PlatformError::EtcValue {
                    task,
                    server: i % servers,
                    value: rows[i],
                });
            }
        }
        Ok(EtcMatrix {
            tasks,
            servers,
            values: rows,
            rows: SharedRows::new(row_of, stored),
            slots: vec![1; servers],
            busy: Vec::new(),
        })
    }

    /// The row `task` may write to: its own, copied out of a row other tasks share.
    fn own_row(&mut self, task: TaskIdx) -> usize {
        let (values, servers) = (&mut self.values, self.servers);
        self.rows.own(task, |r| {
            values.extend_from_within(r * servers..(r + 1) * servers);
        })
    }

    /// Replaces one entry (the caller keeps it finite and ≥ 0, as [`new`](Self::new) checks).
    pub(crate) fn set(&mut self, task: TaskIdx, server: usize, value: f64) {
        let r = self.own_row(task);
        self.values[r * self.servers + server] = value;
    }

    /// How many values the matrix stores (distinct rows × servers).
    pub fn stored_values(&self) -> usize {
        self.values.len()
    }

    /// A matrix whose entry (task, server) is `f(task, server)`.
    pub fn from_fn(
        tasks: usize,
        servers: usize,
        mut f: impl FnMut(TaskIdx, usize) -> f64,
    ) -> Result<Self, PlatformError> {
        let mut values = Vec::with_capacity(tasks * servers);
        for t in 0..tasks {
            for s in 0..servers {
                values.push(f(t, s));
            }
        }
        Self::new(tasks, servers, values)
    }

    /// The same matrix with `slots[s]` tasks running at once on server `s`.
    pub fn with_slots(mut self, slots: Vec<usize>) -> Result<Self, PlatformError> {
        if slots.len() != self.servers {
            return Err(PlatformError::Slots {
                reason: format!(
                    "{} slot counts given for {} servers",
                    slots.len(),
                    self.servers
                ),
            });
        }
        if let Some(s) = slots.iter().position(|&k| k == 0) {
            return Err(PlatformError::Slots {
                reason: format!("server {s} has 0 slots; every server runs at least one task"),
            });
        }
        self.slots = slots;
        self.busy.clear();
        Ok(self)
    }

    /// The same matrix with server `s`'s slots busy until `busy[s][lane]` seconds from the
    /// graph's start (calls queued there before it); lanes not listed are free at 0. Every
    /// mapper and the replay start each slot there, so a plan counts the queues it lands on.
    pub fn with_busy(mut self, busy: Vec<Vec<f64>>) -> Result<Self, PlatformError> {
        if busy.len() != self.servers {
            return Err(PlatformError::Slots {
                reason: format!(
                    "busy times given for {} servers, the matrix has {}",
                    busy.len(),
                    self.servers
                ),
            });
        }
        for (s, lanes) in busy.iter().enumerate() {
            if lanes.len() > self.slots[s] {
                return Err(PlatformError::Slots {
                    reason: format!(
                        "server {s} has {} slot(s) but {} busy times",
                        self.slots[s],
                        lanes.len()
                    ),
                });
            }
            if let Some(t) = lanes.iter().find(|t| !(t.is_finite() && **t >= 0.0)) {
                return Err(PlatformError::Slots {
                    reason: format!("server {s} is busy until {t} s; times must be finite, >= 0"),
                });
            }
        }
        self.busy = busy;
        Ok(self)
    }

    /// When each of server `s`'s slots frees from queued work, s from the graph's start (one
    /// value per slot).
    pub fn free_at(&self, s: usize) -> Vec<f64> {
        let mut lanes = vec![0.0; self.slots[s]];
        if let Some(b) = self.busy.get(s) {
            lanes[..b.len()].copy_from_slice(b);
        }
        lanes
    }

    /// Marks every server whose `mem_capacity` (bytes) is below a task's `mem_bytes` as unable to
    /// run it: a call that pages or dies is never a good placement (the Hydropad lesson).
    pub fn exclude_by_memory(
        &mut self,
        graph: &TaskGraph,
        mem_capacity: &[u64],
    ) -> Result<(), PlatformError> {
        if mem_capacity.len() != self.servers || graph.len() != self.tasks {
            return Err(PlatformError::Memory {
                reason: format!(
                    "{} capacities for {} servers and a graph of {} tasks for {} rows",
                    mem_capacity.len(),
                    self.servers,
                    graph.len(),
                    self.tasks
                ),
            });
        }
        // Tasks sharing a row and a footprint share the excluded row too.
        let mut excluded: std::collections::HashMap<(usize, u64), usize> =
            std::collections::HashMap::new();
        for (t, task) in graph.tasks().enumerate() {
            if !mem_capacity.iter().any(|&cap| task.mem_bytes > cap) {
                continue;
            }
            let key = (self.rows.row(t), task.mem_bytes);
            if let Some(&r) = excluded.get(&key) {
                self.rows.point(t, r);
                continue;
            }
            let r = self.own_row(t);
            for (s, &cap) in mem_capacity.iter().enumerate() {
                if task.mem_bytes > cap {
                    self.values[r * self.servers + s] = f64::INFINITY;
                }
            }
            excluded.insert(key, r);
        }
        Ok(())
    }

    /// Number of tasks (rows).
    pub fn tasks(&self) -> usize {
        self.tasks
    }

    /// Number of servers (columns).
    pub fn servers(&self) -> usize {
        self.servers
    }

    /// Seconds for `task` on `server` (infinite if it cannot run there).
    #[inline]
    pub fn get(&self, task: TaskIdx, server: usize) -> f64 {
        self.values[self.rows.row(task) * self.servers + server]
    }

    /// All servers' times for `task`.
    #[inline]
    pub fn row(&self, task: TaskIdx) -> &[f64] {
        let r = self.rows.row(task);
        &self.values[r * self.servers..(r + 1) * self.servers]
    }

    /// Whether `server` can run `task`.
    #[inline]
    pub fn feasible(&self, task: TaskIdx, server: usize) -> bool {
        self.get(task, server).is_finite()
    }

    /// How many tasks `server` runs at once.
    #[inline]
    pub fn slots(&self, server: usize) -> usize {
        self.slots[server]
    }

    /// Every server's slot count.
    pub fn all_slots(&self) -> &[usize] {
        &self.slots
    }

    /// Slots summed over servers: how many tasks the platform runs at once.
    pub fn total_slots(&self) -> usize {
        self.slots.iter().sum()
    }

    /// Each task's best time over all servers (infinite for a task no server can run).
    pub fn min_per_task(&self) -> Vec<f64> {
        self.per_task(|row| row.iter().copied().fold(f64::INFINITY, f64::min))
    }

    /// `f` of each task's row, evaluated once per stored row: with rows shared, 100,000 tasks
    /// may read a few hundred rows, and a pass over every task's 1,000 values was a tenth of
    /// mapping them.
    pub fn per_task<T: Copy>(&self, f: impl Fn(&[f64]) -> T) -> Vec<T> {
        let of_row: Vec<Option<T>> = (0..self.rows.rows())
            .map(|r| {
                self.rows
                    .is_read(r)
                    .then(|| f(&self.values[r * self.servers..(r + 1) * self.servers]))
            })
            .collect();
        self.rows
            .row_of()
            .iter()
            .map(|&r| of_row[r as usize].expect("a row some task reads"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::dag::Task;

    #[test]
    fn shared_rows_read_and_write_as_a_dense_matrix() {
        // Tasks 0 and 2 share row 0, task 1 has row 1.
        let rows = vec![1.0, 2.0, 3.0, 4.0];
        let mut shared = EtcMatrix::from_shared_rows(2, rows, vec![0, 1, 0]).unwrap();
        let mut dense = EtcMatrix::new(3, 2, vec![1.0, 2.0, 3.0, 4.0, 1.0, 2.0]).unwrap();
        assert_eq!(shared, dense);
        assert_eq!(shared.stored_values(), 4);
        assert_eq!((shared.get(2, 1), shared.row(1)), (2.0, &[3.0, 4.0][..]));
        // Writing one task's entry leaves the task it shared the row with alone.
        shared.set(2, 0, 9.0);
        dense.set(2, 0, 9.0);
        assert_eq!(shared, dense);
        assert_eq!(shared.get(0, 0), 1.0);
        // Per-row summaries follow the copy: task 2 no longer reads task 0's row.
        let sum = |row: &[f64]| row.iter().sum::<f64>();
        assert_eq!(shared.per_task(sum), [3.0, 7.0, 11.0]);
        assert_eq!(shared.per_task(sum), dense.per_task(sum));
        // Memory exclusion per task, whatever the sharing.
        let mut g = TaskGraph::new();
        for (i, mem) in [10u64, 0, 10].into_iter().enumerate() {
            g.add_task(Task::new(format!("t{i}"), "s", 1.0).with_mem(mem));
        }
        let mut shared =
            EtcMatrix::from_shared_rows(2, vec![1.0, 2.0, 3.0, 4.0], vec![0, 0, 1]).unwrap();
        let mut dense = EtcMatrix::new(3, 2, vec![1.0, 2.0, 1.0, 2.0, 3.0, 4.0]).unwrap();
        shared.exclude_by_memory(&g, &[100, 5]).unwrap();
        dense.exclude_by_memory(&g, &[100, 5]).unwrap();
        assert_eq!(shared, dense);
        assert_eq!(shared.row(0), &[1.0, f64::INFINITY][..]);
        assert_eq!(shared.row(1), &[1.0, 2.0][..]);
        // Rows out of range and bad values are refused, naming a task that reads them.
        assert!(EtcMatrix::from_shared_rows(2, vec![1.0; 2], vec![0, 1]).is_err());
        assert!(matches!(
            EtcMatrix::from_shared_rows(2, vec![1.0, -1.0], vec![0, 0]),
            Err(PlatformError::EtcValue {
                task: 0,
                server: 1,
                ..
            })
        ));
    }

    #[test]
    fn etc_rejects_bad_shapes_and_values() {
        assert!(matches!(
            EtcMatrix::new(2, 2, vec![1.0; 3]),
            Err(PlatformError::EtcShape { got: 3, .. })
        ));
        let err = EtcMatrix::new(2, 2, vec![1.0, 1.0, f64::NAN, 1.0]).unwrap_err();
        assert_eq!(
            err.to_string().split(';').next().unwrap(),
            "ETC of task 1 on server 0 is NaN"
        );
        assert!(EtcMatrix::new(1, 2, vec![1.0, f64::INFINITY]).is_ok());
        let e = EtcMatrix::new(1, 2, vec![1.0, 2.0]).unwrap();
        assert!(e.clone().with_slots(vec![1]).is_err());
        assert!(e.clone().with_slots(vec![1, 0]).is_err());
        assert_eq!(e.with_slots(vec![2, 3]).unwrap().total_slots(), 5);
    }

    #[test]
    fn memory_that_does_not_fit_is_infeasible() {
        let mut g = TaskGraph::new();
        g.add_task(Task::new("dark", "darkmatter", 1.0).with_mem(800));
        g.add_task(Task::new("bar", "barmatter", 1.0).with_mem(300));
        let mut e = EtcMatrix::new(2, 2, vec![1.0, 2.0, 3.0, 4.0]).unwrap();
        e.exclude_by_memory(&g, &[1000, 500]).unwrap();
        assert!(e.feasible(0, 0) && !e.feasible(0, 1));
        assert!(e.feasible(1, 0) && e.feasible(1, 1));
        assert_eq!(e.min_per_task(), [1.0, 3.0]);
    }
}
