//! The files in deploy/: each parses, the systemd units pass `systemd-analyze verify` (where
//! systemd is installed), the Kubernetes manifests are well-formed and agree with each other,
//! and the Slurm launcher runs a real grid on this machine with `srun` and `scontrol` shims
//! that start each step locally.

use gridwise_e2e::{cargo_build, free_port};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use yaml_rust2::{Yaml, YamlLoader};

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(deploy().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn systemd_units_verify() {
    let bin = cargo_build(&["-p", "gridwise", "--bin", "gridwise"])
        .unwrap()
        .join("gridwise");
    let dir = tempfile::tempdir().unwrap();
    for unit in ["gridwise-agent.service", "gridwise-server.service"] {
        let text = read(&format!("systemd/{unit}"));
        for section in ["[Unit]", "[Service]", "[Install]"] {
            assert!(text.contains(section), "{unit} has no {section}");
        }
        assert!(text.contains("NoNewPrivileges=yes") && text.contains("DynamicUser=yes"));
        // verify checks that ExecStart exists: point it at the binary just built.
        let local = text.replace("/usr/local/bin/gridwise", &bin.display().to_string());
        std::fs::write(dir.path().join(unit), local).unwrap();
    }
    let Ok(out) = Command::new("systemd-analyze")
        .arg("verify")
        .arg("--man=no")
        .arg(dir.path().join("gridwise-agent.service"))
        .arg(dir.path().join("gridwise-server.service"))
        .output()
    else {
        eprintln!("systemd-analyze is not installed: the units were only read");
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "systemd-analyze verify: {stderr}");
    // Warnings about the units themselves (not about the host's other units) are failures too.
    let ours: Vec<&str> = stderr.lines().filter(|l| l.contains("gridwise-")).collect();
    assert!(
        ours.is_empty(),
        "systemd-analyze verify:\n{}",
        ours.join("\n")
    );
}

fn str_at<'a>(doc: &'a Yaml, path: &[&str]) -> Option<&'a str> {
    let mut y = doc;
    for k in path {
        y = &y[*k];
    }
    y.as_str()
}

#[test]
fn kubernetes_manifests_are_complete_and_agree() {
    let docs = YamlLoader::load_from_str(&read("k8s/gridwise.yaml")).expect("valid YAML");
    let kinds: Vec<&str> = docs
        .iter()
        .map(|d| str_at(d, &["kind"]).expect("every document has a kind"))
        .collect();
    for want in [
        "Namespace",
        "ConfigMap",
        "PersistentVolumeClaim",
        "Deployment",
        "Service",
        "DaemonSet",
    ] {
        assert!(kinds.contains(&want), "no {want} in {kinds:?}");
    }
    for d in &docs {
        assert!(str_at(d, &["apiVersion"]).is_some(), "{d:?}");
        assert!(str_at(d, &["metadata", "name"]).is_some(), "{d:?}");
        if str_at(d, &["kind"]) != Some("Namespace") {
            assert_eq!(str_at(d, &["metadata", "namespace"]), Some("gridwise"));
        }
    }
    let by_kind = |k: &str| {
        docs.iter()
            .find(|d| str_at(d, &["kind"]) == Some(k))
            .unwrap()
    };
    // The configuration the pods mount is what the daemons accept.
    let cm = by_kind("ConfigMap");
    let agent: gridwise_agent::AgentConfig =
        toml::from_str(str_at(cm, &["data", "agent.toml"]).unwrap()).expect("agent.toml");
    agent
        .accept()
        .expect("the agent's settings pass its checks");
    let server: gridwise_server::ServerConfig =
        toml::from_str(str_at(cm, &["data", "server.toml"]).unwrap()).expect("server.toml");
    // Servers reach the agent through its Service.
    assert!(
        server.agent.starts_with("gridwise-agent.gridwise.svc"),
        "{}",
        server.agent
    );
    // The agent's pod keeps its data on the claim; the Service selects the agent's pods.
    let dep = by_kind("Deployment");
    let spec = &dep["spec"]["template"]["spec"];
    let claim = spec["volumes"]
        .as_vec()
        .unwrap()
        .iter()
        .find_map(|v| str_at(v, &["persistentVolumeClaim", "claimName"]))
        .expect("a volume from the claim");
    assert_eq!(
        claim,
        str_at(by_kind("PersistentVolumeClaim"), &["metadata", "name"]).unwrap()
    );
    assert_eq!(
        str_at(
            by_kind("Service"),
            &["spec", "selector", "app.kubernetes.io/name"]
        ),
        str_at(
            dep,
            &[
                "spec",
                "template",
                "metadata",
                "labels",
                "app.kubernetes.io/name"
            ]
        )
    );
    for pod in [spec, &by_kind("DaemonSet")["spec"]["template"]["spec"]] {
        assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
    }
}

#[test]
fn the_containerfile_builds_a_small_non_root_image() {
    let text = read("container/Containerfile");
    let instructions: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter(|l| !l.starts_with("&&") && !l.starts_with("--"))
        .collect();
    let known = [
        "FROM",
        "WORKDIR",
        "COPY",
        "RUN",
        "USER",
        "EXPOSE",
        "ENTRYPOINT",
        "CMD",
        "ENV",
        "ARG",
    ];
    let mut continued = false;
    for l in &instructions {
        let word = l.split_whitespace().next().unwrap_or("");
        assert!(
            continued || known.contains(&word),
            "not an instruction: {l}"
        );
        continued = l.ends_with('\\');
    }
    let froms = instructions
        .iter()
        .filter(|l| l.starts_with("FROM "))
        .count();
    assert!(froms >= 2, "multi-stage: a build stage and a runtime stage");
    assert!(text.contains("COPY --from=build"));
    let user = instructions
        .iter()
        .rev()
        .find(|l| l.starts_with("USER "))
        .expect("a USER");
    assert!(!user.contains(" 0") && !user.contains("root"), "{user}");
    // What it copies from the source tree exists.
    assert!(deploy().join("../examples/services").is_dir());
    assert!(
        deploy().join("../.dockerignore").is_file(),
        "target/ must stay out of the build context"
    );
}

#[test]
fn the_slurm_launcher_starts_a_grid_runs_the_program_and_stops_it() {
    let script = deploy().join("slurm/gridwise.sbatch");
    let syntax = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        syntax.status.success(),
        "{}",
        String::from_utf8_lossy(&syntax.stderr)
    );

    let bin = cargo_build(&["-p", "gridwise", "--bin", "gridwise"])
        .unwrap()
        .join("gridwise");
    let dir = tempfile::tempdir().unwrap();
    let shims = dir.path().join("bin");
    std::fs::create_dir(&shims).unwrap();
    // One node, this machine: `scontrol show hostnames` names it; `srun` drops its options
    // and runs the step here, with the node name srun would set.
    let write = |name: &str, body: &str| {
        let p = shims.join(name);
        std::fs::write(&p, body).unwrap();
        Command::new("chmod").arg("+x").arg(&p).status().unwrap();
    };
    write("scontrol", "#!/bin/bash\necho 127.0.0.1\n");
    write(
        "srun",
        "#!/bin/bash\nwhile [[ \"$1\" == --* ]]; do shift; done\nexport SLURMD_NODENAME=127.0.0.1\nexec \"$@\"\n",
    );
    let path = format!(
        "{}:{}",
        shims.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let work = dir.path().join("work");
    let mut child = Command::new("bash")
        .arg(&script)
        .args([bin.to_str().unwrap(), "call", "add", "41"])
        .env("PATH", path)
        .env("GRIDWISE", &bin)
        .env("GRIDWISE_SLURM_PORT", free_port().to_string())
        .env("GRIDWISE_SLURM_SERVER_PORT", free_port().to_string())
        .env("GRIDWISE_SLURM_BIND", "127.0.0.1")
        .env("GRIDWISE_SLURM_WORK", &work)
        .env("SLURM_JOB_NODELIST", "node1")
        .env("SLURM_JOB_ID", "test")
        .env("SLURM_JOB_NUM_NODES", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    // Whatever happens, the launcher and every daemon it started go with the test.
    let group = child.id() as i32;
    struct KillGroup(i32);
    impl Drop for KillGroup {
        fn drop(&mut self) {
            // SAFETY: a signal to a process group this test created.
            unsafe { libc::kill(-self.0, libc::SIGKILL) };
        }
    }
    let _group = KillGroup(group);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            panic!(
                "the launcher did not finish in 120 s; agent log:\n{}",
                std::fs::read_to_string(work.join("agent.log")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let logs = std::fs::read_to_string(work.join("agent.log")).unwrap_or_default();
    assert!(
        out.status.success(),
        "{stdout}\n{}\n{logs}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 of 1 server(s) up"), "{stdout}");
    assert!(stdout.lines().any(|l| l.trim() == "42"), "{stdout}");
    // Nothing is left running: the agent's port is free again.
    let agent_out = std::fs::read_to_string(work.join("agent.out")).unwrap();
    let addr = agent_out
        .trim()
        .trim_start_matches("listening ")
        .to_string();
    assert!(
        gridwise_e2e::eventually(Duration::from_secs(10), || std::net::TcpStream::connect(
            &addr
        )
        .is_err()),
        "the agent at {addr} still answers after the job ended"
    );
}

#[test]
fn the_two_agent_examples_agree_with_each_other_and_the_daemons() {
    // The plain files: every server and client lists the same agents, and each file passes
    // its daemon's checks.
    let agent: gridwise_agent::AgentConfig =
        toml::from_str(&read("two-agents/agent.toml")).expect("agent.toml");
    agent
        .accept()
        .expect("the agent's settings pass its checks");
    let server: gridwise_server::ServerConfig =
        toml::from_str(&read("two-agents/server.toml")).expect("server.toml");
    server
        .check()
        .expect("the server's settings pass its checks");
    let client: gridwise_client::ClientConfig =
        toml::from_str(&read("two-agents/client.toml")).expect("client.toml");
    client
        .check()
        .expect("the client's settings pass its checks");
    assert_eq!(server.agent_addrs().len(), 2);
    assert_eq!(server.agent_addrs(), client.agent_addrs());
    let dropin = read("two-agents/systemd/store.conf");
    assert!(dropin.contains("[Service]") && dropin.contains("EnvironmentFile="));
    assert!(read("two-agents/agent.toml").contains("GRIDWISE_AGENT_STORE"));

    // Kubernetes: the servers list each pod of the agents' StatefulSet by its stable name.
    let docs =
        YamlLoader::load_from_str(&read("k8s/gridwise-two-agents.yaml")).expect("valid YAML");
    let by_kind = |k: &str| {
        docs.iter()
            .find(|d| str_at(d, &["kind"]) == Some(k))
            .unwrap_or_else(|| panic!("no {k}"))
    };
    let sts = by_kind("StatefulSet");
    let service = str_at(sts, &["spec", "serviceName"]).unwrap();
    let replicas = sts["spec"]["replicas"].as_i64().unwrap();
    let cm = by_kind("ConfigMap");
    let server: gridwise_server::ServerConfig =
        toml::from_str(str_at(cm, &["data", "server.toml"]).unwrap()).expect("server.toml");
    server.check().unwrap();
    let want: Vec<String> = (0..replicas)
        .map(|i| format!("gridwise-agent-{i}.{service}.gridwise.svc.cluster.local:7000"))
        .collect();
    assert_eq!(server.agent_addrs(), want);
    let agent: gridwise_agent::AgentConfig =
        toml::from_str(str_at(cm, &["data", "agent.toml"]).unwrap()).expect("agent.toml");
    agent.accept().unwrap();
    // The headless Service that makes those names, and the store's URL from a Secret.
    let headless = docs
        .iter()
        .find(|d| {
            str_at(d, &["kind"]) == Some("Service")
                && str_at(d, &["metadata", "name"]) == Some(service)
        })
        .expect("the StatefulSet's Service");
    assert_eq!(str_at(headless, &["spec", "clusterIP"]), Some("None"));
    let env = sts["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_vec()
        .unwrap();
    assert!(
        env.iter()
            .any(|e| str_at(e, &["name"]) == Some("GRIDWISE_AGENT_STORE")
                && str_at(e, &["valueFrom", "secretKeyRef", "name"]).is_some())
    );
}
