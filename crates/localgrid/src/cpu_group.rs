//! Control groups of the CPU controller, made for a run and removed after it: daemons placed
//! in one of their own, as systemd (`systemd-run --scope`, a unit's slice), Slurm or
//! Kubernetes place them, with the competing load in another. The scheduler then shares the
//! cores between the groups by their weights before it shares a group's among its threads.

use crate::{Hosts, own_session};
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A control group this process made (and removes when dropped, its processes gone by then).
pub struct CpuGroup {
    dir: PathBuf,
    procs: CString,
}

/// Where a group of the CPU controller can be made here: the v1 `cpu` hierarchy, or the v2
/// one with the `cpu` controller on offer. `None`, and why, where neither is writable.
fn cpu_hierarchy() -> Result<PathBuf, String> {
    for v1 in ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"] {
        if Path::new(v1).join("cpu.shares").exists() {
            return Ok(v1.into());
        }
    }
    for v2 in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
        let root = Path::new(v2);
        let offered = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
        if offered.split_whitespace().any(|c| c == "cpu") {
            // Children get the controller only when their parent hands it down.
            std::fs::write(root.join("cgroup.subtree_control"), "+cpu").map_err(|e| {
                format!("cannot enable the cpu controller under {v2}: {e} (needs root)")
            })?;
            return Ok(root.into());
        }
    }
    Err("no cgroup hierarchy with the cpu controller (v1 cpu or v2 with cpu offered) under /sys/fs/cgroup".into())
}

impl CpuGroup {
    /// Makes the group `name` (a path of one or more parts) under the CPU hierarchy's root.
    pub fn make(name: &str) -> Result<CpuGroup, String> {
        let dir = cpu_hierarchy()?.join(name);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot make the cgroup {}: {e} (needs root)", dir.display()))?;
        if let Some(parent) = dir.parent()
            && parent.join("cgroup.subtree_control").exists()
        {
            // v2: the group's parent must hand the controller down too.
            let _ = std::fs::write(parent.join("cgroup.subtree_control"), "+cpu");
        }
        let procs = CString::new(dir.join("cgroup.procs").display().to_string())
            .map_err(|e| e.to_string())?;
        Ok(CpuGroup { dir, procs })
    }

    /// Prepares `cmd` to start in a session of its own, inside this group.
    pub fn place(&self, cmd: &mut Command) {
        use std::os::unix::process::CommandExt;
        own_session(cmd);
        let procs = self.procs.clone();
        // SAFETY: open(2), write(2) and close(2) are async-signal-safe; the path was made
        // before the fork. Writing 0 moves the writer, the child about to exec.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let wrote = libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
                if wrote != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    /// Lets the group's processes use at most `cores` cores between them (a CPU quota, as
    /// `systemd-run -p CPUQuota=` or a Kubernetes CPU limit sets one).
    pub fn set_quota(&self, cores: f64) -> Result<(), String> {
        const PERIOD_US: u64 = 100_000;
        let quota_us = (cores * PERIOD_US as f64).round() as u64;
        let write = |file: &str, text: String| {
            std::fs::write(self.dir.join(file), text)
                .map_err(|e| format!("cannot write {}: {e}", self.dir.join(file).display()))
        };
        if self.dir.join("cpu.max").exists() {
            write("cpu.max", format!("{quota_us} {PERIOD_US}"))
        } else {
            write("cpu.cfs_period_us", PERIOD_US.to_string())?;
            write("cpu.cfs_quota_us", quota_us.to_string())
        }
    }

    /// The processes in the group now.
    pub fn pids(&self) -> Vec<u32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for CpuGroup {
    fn drop(&mut self) {
        // A group's processes must be gone before it can be removed: anything left is killed.
        for _ in 0..50 {
            let left = self.pids();
            if left.is_empty() {
                break;
            }
            for pid in left {
                // SAFETY: kill(2) on a pid read from the group this process made.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = std::fs::remove_dir(&self.dir);
        // The run's parent group, once its last child is gone.
        if let Some(parent) = self.dir.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

/// Every daemon on 127.0.0.1, each in a session of its own, all in one control group.
pub struct InCpuGroup(pub std::sync::Arc<CpuGroup>);

impl Hosts for InCpuGroup {
    fn ip(&self, _daemon: &str) -> anyhow::Result<String> {
        Ok("127.0.0.1".into())
    }

    fn place(&self, _daemon: &str, cmd: &mut Command) -> anyhow::Result<()> {
        self.0.place(cmd);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Needs root and a writable cgroup hierarchy: says so and passes trivially otherwise
    /// (CI runs as root with one).
    #[test]
    fn a_process_started_in_a_group_is_in_it_and_the_group_goes_with_it() {
        let name = format!("gridwise-test-{}/a", std::process::id());
        let g = match CpuGroup::make(&name) {
            Ok(g) => g,
            Err(e) => {
                eprintln!("skipped: {e}");
                return;
            }
        };
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        g.place(&mut cmd);
        let mut child = cmd.spawn().expect("sleep starts");
        assert_eq!(g.pids(), vec![child.id()]);
        let cgroup = std::fs::read_to_string(format!("/proc/{}/cgroup", child.id())).unwrap();
        assert!(cgroup.contains(&name), "{cgroup}");
        let dir = g.path().to_path_buf();
        drop(g);
        let _ = child.wait();
        assert!(!dir.exists() && !dir.parent().unwrap().exists());
    }
}
