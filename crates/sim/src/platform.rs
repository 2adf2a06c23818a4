//! The simulated servers: classes of identical servers with a speed function per service and an
//! availability trace, plus the links between them.

use crate::scenario::ScenarioError;
use crate::workload::Workload;
use gridwise_kernels::{LoadTrace, SpeedFunction};
use gridwise_sched::{CommModel, EtcMatrix, TaskIdx};
use std::collections::{BTreeMap, HashMap, HashSet};

/// A class of identical servers.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerClass {
    /// Its servers are named `name-0`, `name-1`, … (just `name` when `count` is 1).
    pub name: String,
    /// Servers in the class; [`Platform::new`] refuses 0.
    pub count: usize,
    /// Calls each server runs at once.
    pub slots: usize,
    /// Speed function per service it offers.
    pub speeds: BTreeMap<String, SpeedFunction>,
    /// What fraction of its speed a call gets over time.
    pub load: LoadTrace,
}

impl ServerClass {
    /// Seconds a call of `service` with `work` operations at `size` takes at full availability:
    /// work ÷ S(size), infinite where the class cannot run it (no speed function, or speed 0).
    pub fn exec_s(&self, service: &str, work: f64, size: f64) -> f64 {
        match self.speeds.get(service).map(|f| f.speed(size)) {
            Some(v) if v > 0.0 => work / v,
            _ => f64::INFINITY,
        }
    }
}

/// The servers of a scenario (numbered class by class) and their links.
#[derive(Clone, Debug)]
pub struct Platform {
    classes: Vec<ServerClass>,
    names: Vec<String>,
    class_of: Vec<usize>,
    comm: CommModel,
}

impl Platform {
    /// A platform from its classes and a communication model over all their servers. Server `i`
    /// of class `c` is named `c-i`, or `c` when the class has one server.
    pub fn new(classes: Vec<ServerClass>, comm: CommModel) -> Result<Platform, ScenarioError> {
        let mut names = Vec::new();
        let mut class_of = Vec::new();
        for (k, c) in classes.iter().enumerate() {
            if c.slots == 0 || c.count == 0 {
                return Err(ScenarioError::invalid(
                    format!("servers[{k}]"),
                    "count and slots must be at least 1",
                ));
            }
            for i in 0..c.count {
                names.push(if c.count == 1 {
                    c.name.clone()
                } else {
                    format!("{}-{i}", c.name)
                });
                class_of.push(k);
            }
        }
        let mut seen = HashSet::new();
        if let Some(dup) = names.iter().find(|n| !seen.insert(n.as_str())) {
            return Err(ScenarioError::invalid(
                "servers",
                format!("two servers are named {dup:?}; rename a class so generated names differ"),
            ));
        }
        if comm.servers() != names.len() {
            return Err(ScenarioError::invalid(
                "links",
                format!(
                    "communication model has {} servers, the classes {}",
                    comm.servers(),
                    names.len()
                ),
            ));
        }
        Ok(Platform {
            classes,
            names,
            class_of,
            comm,
        })
    }

    pub fn servers(&self) -> usize {
        self.names.len()
    }

    /// Server names, by index.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The classes, in scenario order.
    pub fn classes(&self) -> &[ServerClass] {
        &self.classes
    }

    pub fn class_of(&self, s: usize) -> &ServerClass {
        &self.classes[self.class_of[s]]
    }

    /// Every server's slot count.
    pub fn slots(&self) -> Vec<usize> {
        self.class_of
            .iter()
            .map(|&k| self.classes[k].slots)
            .collect()
    }

    /// Server `s`'s speed function for `service`, if it offers it.
    pub fn speed(&self, s: usize, service: &str) -> Option<&SpeedFunction> {
        self.class_of(s).speeds.get(service)
    }

    /// Server `s`'s availability trace: its class's, which every server of the class follows.
    pub fn availability(&self, s: usize) -> &LoadTrace {
        &self.class_of(s).load
    }

    /// Seconds task `t` of `w` takes on server `s` at full availability (infinite if it cannot
    /// run there). The simulation and [`Platform::true_etc`] share this arithmetic, so they agree
    /// to the bit.
    pub fn exec_s(&self, w: &Workload, t: TaskIdx, s: usize) -> f64 {
        let task = w.graph.task(t);
        self.class_of(s)
            .exec_s(&task.service, task.work, w.sizes[t])
    }

    /// The ETC matrix of `w` on these servers at full availability: C(x) ÷ S(x), infinite where
    /// a server cannot run a task, with the servers' slots. Built class by class, so a task costs
    /// one speed evaluation per class, not per server; tasks of the same service, work and size
    /// have the same row and share it (a large workload has far fewer such triples than tasks).
    pub fn true_etc(&self, w: &Workload) -> EtcMatrix {
        let m = self.servers();
        let mut values = Vec::new();
        let mut row_of = Vec::with_capacity(w.graph.len());
        let mut seen: HashMap<(&str, u64, u64), u32> = HashMap::new();
        for (t, task) in w.graph.tasks().enumerate() {
            let key = (
                task.service.as_str(),
                task.work.to_bits(),
                w.sizes[t].to_bits(),
            );
            let next = (values.len() / m.max(1)) as u32;
            let row = *seen.entry(key).or_insert_with(|| {
                for c in &self.classes {
                    let v = c.exec_s(&task.service, task.work, w.sizes[t]);
                    values.extend(std::iter::repeat_n(v, c.count));
                }
                next
            });
            row_of.push(row);
        }
        // Work is finite and >= 0 (complexities are checked) and speeds > 0 where used, so
        // every value is >= 0 or infinite, and slots are >= 1 (checked in `new`).
        match EtcMatrix::from_shared_rows(m, values, row_of)
            .and_then(|e| e.with_slots(self.slots()))
        {
            Ok(e) => e,
            Err(e) => unreachable!("true ETC values are >= 0 or infinite: {e}"),
        }
    }

    /// The communication model (a copy; see [`Platform::comm_model`] to borrow it).
    pub fn comm(&self) -> CommModel {
        self.comm.clone()
    }

    /// The communication model, borrowed.
    pub fn comm_model(&self) -> &CommModel {
        &self.comm
    }

    /// One constant rate (operations/s) per server for the constant-speed policy, as classic
    /// GridSolve measured it: one benchmark per server, here its speed for the first service it
    /// offers (by name) at `probe_size`, or when that is `None` at the middle of that speed
    /// function's size range. If the probe size does not fit (speed 0), the function's best
    /// speed stands in, as a benchmark would have been run at a size that fits.
    pub fn rates(&self, probe_size: Option<f64>) -> Vec<f64> {
        let per_class: Vec<f64> = self
            .classes
            .iter()
            .map(|c| {
                let Some(f) = c.speeds.values().next() else {
                    return 0.0;
                };
                let p = f.points();
                let size = probe_size.unwrap_or((p[0].0 + p[p.len() - 1].0) / 2.0);
                let v = f.speed(size);
                if v > 0.0 {
                    v
                } else {
                    p.iter().map(|q| q.1).fold(0.0, f64::max)
                }
            })
            .collect();
        self.class_of.iter().map(|&k| per_class[k]).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn availability_integrates_step_by_step() {
        let a = LoadTrace::new(vec![(10.0, 0.5), (30.0, 1.0)]).unwrap();
        assert_eq!(a.at(0.0), 1.0);
        assert_eq!(a.at(10.0), 0.5);
        assert_eq!(a.at(40.0), 1.0);
        // 20 s of work from 0: 10 s at full speed, then 20 s at half speed.
        assert_eq!(a.finish(0.0, 20.0), 30.0);
        // From 5: 5 s full, 20 s half (10 s of work), then 5 s full.
        assert_eq!(a.finish(5.0, 20.0), 35.0);
        // Entirely inside the slow step.
        assert_eq!(a.finish(12.0, 4.0), 20.0);
        assert_eq!(a.finish(3.0, 0.0), 3.0);
        assert_eq!(LoadTrace::always().finish(1.5, 2.25), 3.75);
    }

    #[test]
    fn bad_availability_is_explained() {
        let e = LoadTrace::new(vec![(5.0, 0.5), (5.0, 1.0)]).unwrap_err();
        assert!(e.contains("strictly increasing"), "{e}");
        let e = LoadTrace::new(vec![(0.0, 0.0)]).unwrap_err();
        assert!(e.contains("(0, 1]"), "{e}");
        assert!(LoadTrace::new(vec![(-1.0, 0.5)]).is_err());
        assert!(LoadTrace::new(vec![(0.0, 1.5)]).is_err());
    }
}
