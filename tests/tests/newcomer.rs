//! What a new user trips on (issue 32): commands that fail as the documentation writes them,
//! secrets shown where anyone can read them. Each test here failed on the behaviour it names.

use gridwise_e2e::{FAST_HEARTBEATS, Grid, gridwise_cli};
use std::process::Command;

const SECRET: &str = "s3cr3t-t0ken-value";

/// `gridwise` with `args`, `GRIDWISE_TOKEN` set to [`SECRET`] and nothing else of the caller's
/// grid settings: (success, stdout, stderr).
fn gridwise(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(gridwise_cli())
        .args(args)
        .env("GRIDWISE_TOKEN", SECRET)
        .env_remove("GRIDWISE_AGENT")
        .output()
        .expect("gridwise runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn help_never_prints_the_token_from_the_environment() {
    for args in [
        &["status", "--help"][..],
        &["call", "--help"],
        &["model", "plot", "--help"],
    ] {
        let (ok, out, err) = gridwise(args);
        assert!(ok, "gridwise {args:?}: {err}");
        assert!(out.contains("GRIDWISE_TOKEN"), "{out}");
        assert!(
            !out.contains(SECRET),
            "gridwise {args:?} shows the token:\n{out}"
        );
    }
}

#[test]
fn config_is_taken_before_the_command_as_deploy_client_toml_says() {
    // deploy/client.toml's first line: `gridwise --config deploy/client.toml status`.
    let first =
        std::fs::read_to_string(gridwise_e2e::repo_root().join("deploy/client.toml")).unwrap();
    assert!(first.starts_with("# gridwise --config deploy/client.toml status"));
    let g = Grid::agent(&FAST_HEARTBEATS);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("client.toml");
    std::fs::write(&file, format!("agent = \"{}\"\n", g.agent.addr)).unwrap();
    let file = file.display().to_string();
    for args in [
        &["--config", &file, "status", "--json"][..],
        &["status", "--json", "--config", &file],
    ] {
        let (ok, out, err) = gridwise(args);
        assert!(ok, "gridwise {args:?}: {err}");
        let status: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert!(status["servers"].is_array(), "{out}");
    }
    // A command that takes no config says so rather than ignoring it.
    let (ok, _, err) = gridwise(&["--config", &file, "sim", "examples/sim/small.json"]);
    assert!(!ok);
    assert!(
        err.contains("--config") && err.contains("takes none"),
        "{err}"
    );
}

/// The relative links of `text` (a Markdown file's): the targets of `](…)` that are neither
/// web addresses nor anchors, without their `#fragment`.
fn relative_links(text: &str) -> Vec<&str> {
    text.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &text[at + 2..];
            let target = &rest[..rest.find(')')?];
            let target = target.split('#').next()?;
            let web = target.contains("://") || target.starts_with("mailto:");
            (!web && !target.is_empty()).then_some(target)
        })
        .collect()
}

#[test]
fn every_link_of_the_documentation_is_to_a_file_in_the_repository() {
    let root = gridwise_e2e::repo_root();
    let docs = [
        "README.md",
        "docs/ARCHITECTURE.md",
        "docs/DESIGN.md",
        "examples/sim/README.md",
    ];
    let mut broken = Vec::new();
    for doc in docs {
        let path = root.join(doc);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{doc}: {e}"));
        let dir = path.parent().unwrap();
        for target in relative_links(&text) {
            let resolved = dir.join(target);
            // Out of the repository (the shared folder beside it) counts as broken: a clone
            // has nothing there.
            let inside = resolved.canonicalize().is_ok_and(|p| p.starts_with(&root));
            if !inside {
                broken.push(format!("{doc}: {target}"));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links to nothing:\n{}",
        broken.join("\n")
    );
    assert_eq!(
        relative_links("[a](b.md#x) [c](https://d) [e](#f) [g](../h/)"),
        ["b.md", "../h/"]
    );
}

/// The packages `text` names after each `apt-get install` (up to the closing backtick or the
/// end of the line of a shell command), options left out.
fn apt_installs(text: &str) -> std::collections::BTreeSet<String> {
    text.match_indices("apt-get install ")
        .flat_map(|(at, m)| {
            let rest = &text[at + m.len()..];
            let end = rest.find(['`', ';', '"']).unwrap_or(rest.len());
            rest[..end]
                .split_whitespace()
                .filter(|w| !w.starts_with('-'))
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn the_readme_names_every_system_package_the_ci_installs() {
    let root = gridwise_e2e::repo_root();
    let ci = std::fs::read_to_string(root.join(".ci/run")).expect(".ci/run");
    let needed: std::collections::BTreeSet<String> = ci
        .match_indices("missing+=(")
        .flat_map(|(at, m)| {
            let rest = &ci[at + m.len()..];
            rest[..rest.find(')').expect("missing+=( … )")].split_whitespace()
        })
        .map(str::to_string)
        .collect();
    assert!(needed.contains("postgresql"), "{needed:?}");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let named = apt_installs(&readme);
    let unnamed: Vec<_> = needed.difference(&named).collect();
    assert!(
        unnamed.is_empty(),
        ".ci/run installs {unnamed:?}, which no `apt-get install` of the README names (it names {named:?})"
    );
    assert_eq!(
        apt_installs("(`apt-get install -y a\nb`; x) apt-get install c; d"),
        ["a", "b", "c"].map(String::from).into()
    );
}

/// The README's first C program (under "From C"), as the user copies it.
fn readme_c_program() -> String {
    let readme = std::fs::read_to_string(gridwise_e2e::repo_root().join("README.md")).unwrap();
    let from_c = &readme[readme.find("## From C").expect("a From C section")..];
    let start = from_c.find("```c\n").expect("a C program under From C") + 5;
    let len = from_c[start..].find("```").unwrap();
    from_c[start..start + len].to_string()
}

/// Compiles `source` against this build's libgridwise with warnings as errors.
fn compile_c(source: &str, dir: &std::path::Path) -> std::path::PathBuf {
    let root = gridwise_e2e::repo_root();
    let lib = gridwise_e2e::capi_lib_dir();
    let src = dir.join("prog.c");
    std::fs::write(&src, source).unwrap();
    let exe = dir.join("prog");
    let cc = Command::new("cc")
        .args([
            "-std=c99",
            "-D_POSIX_C_SOURCE=200809L",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-o",
        ])
        .arg(&exe)
        .arg("-I")
        .arg(root.join("crates/capi/include"))
        .arg(&src)
        .arg(lib.join("libgridwise.a"))
        .args(["-lpthread", "-ldl", "-lm"])
        .output()
        .expect("a C compiler (cc)");
    assert!(
        cc.status.success(),
        "the README's C program does not compile:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    exe
}

#[test]
fn the_readmes_c_program_runs_and_says_so_when_nothing_answers() {
    let source = readme_c_program();
    let g = Grid::two_servers();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("client.toml");
    std::fs::write(
        &config,
        format!("agent = \"{}\"\nconnect_timeout_ms = 2000\n", g.agent.addr),
    )
    .unwrap();
    let run = |exe: &std::path::Path| {
        let out = Command::new(exe).arg(&config).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Pointed at a real server of the grid, it prints both results.
    assert!(source.contains("\"127.0.0.1:7100\""));
    let at_s1 = source.replace("127.0.0.1:7100", &g.servers[0].addr);
    let exe = compile_c(&at_s1, dir.path());
    let (code, out, err) = run(&exe);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("C = [58 64; 139 154]") && out.contains("add(41) = 42"),
        "{out}"
    );
    // As written, where nothing listens at 127.0.0.1:7100 (nothing of this grid does): it
    // fails, saying where, instead of printing `add(41) = 0` and exiting 0.
    if std::net::TcpStream::connect("127.0.0.1:7100").is_ok() {
        eprintln!("something listens on 127.0.0.1:7100: the failing half is not run");
        return;
    }
    let exe = compile_c(&source, dir.path());
    let (code, out, err) = run(&exe);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.contains("C = [58 64; 139 154]"), "{out}");
    assert!(!out.contains("add(41)"), "{out}");
    assert!(err.starts_with("add"), "{err}");
}

#[test]
fn a_tls_grid_configured_with_relative_paths_starts_from_any_folder() {
    let home = tempfile::tempdir().unwrap();
    let cli = |args: &[&str], cwd: &std::path::Path| {
        let out = Command::new(gridwise_cli())
            .args(args)
            .current_dir(cwd)
            .env_remove("GRIDWISE_TOKEN")
            .env_remove("GRIDWISE_AGENT")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "gridwise {args:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    // As the README does it, from the grid's folder with a relative one for the certificates.
    cli(&["certs", "init", "certs"], home.path());
    for (role, name) in [("agent", "agent"), ("client", "alice")] {
        let printed = cli(
            &[
                "certs",
                "issue",
                "certs",
                "--role",
                role,
                "--name",
                name,
                "--host",
                "127.0.0.1",
            ],
            home.path(),
        );
        // What it prints to paste works from anywhere: absolute paths.
        let ca = printed
            .lines()
            .find_map(|l| l.strip_prefix("ca = \""))
            .expect("a ca line");
        assert!(ca.starts_with('/'), "{printed}");
    }
    // Config files in a folder of their own, naming the certificates relative to it.
    let conf = home.path().join("conf");
    std::fs::create_dir(&conf).unwrap();
    let tls = |name: &str| {
        format!(
            "[tls]\nca = \"../certs/ca.pem\"\ncert = \"../certs/{name}.pem\"\nkey = \"../certs/{name}.key\"\n"
        )
    };
    std::fs::write(
        conf.join("agent.toml"),
        format!(
            "listen = \"127.0.0.1:0\"\ndata_dir = \"agent-data\"\n{}",
            tls("agent")
        ),
    )
    .unwrap();
    // The agent started from / (as systemd starts it), in a session of its own.
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let mut agent = Command::new(gridwise_cli())
        .args(["agent", "--config"])
        .arg(conf.join("agent.toml"))
        .current_dir("/")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let stdout = agent.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .unwrap_or_default();
    let Some(addr) = line.trim().strip_prefix("listening ") else {
        let _ = agent.kill();
        let out = agent.wait_with_output().unwrap();
        panic!(
            "the agent did not start from /: {line}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let addr = addr.to_string();
    // Its data folder is beside its config, not in /.
    let data_ok = conf.join("agent-data").is_dir();
    // A client whose config names its certificates relative to itself, run from elsewhere.
    std::fs::write(
        conf.join("client.toml"),
        format!("agent = \"{addr}\"\n{}", tls("alice")),
    )
    .unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let status = Command::new(gridwise_cli())
        .arg("--config")
        .arg(conf.join("client.toml"))
        .args(["status", "--json"])
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    let _ = agent.kill();
    let _ = agent.wait();
    assert!(data_ok, "no agent-data beside the agent's config");
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
}

#[test]
fn tokens_appear_in_no_log_and_no_status() {
    let (clients, servers) = ("client-s3cr3t-4417", "server-s3cr3t-9902");
    let mut flags: Vec<&str> = FAST_HEARTBEATS.to_vec();
    flags.extend(["--client-token", clients, "--server-token", servers]);
    let mut g = Grid::agent(&flags);
    g.server("s1", "slots = 2\ncalibrate = false\n");
    g.wait_up(1);
    let c = g.client();
    let add = c.function_handle_default("add").unwrap();
    let out = c
        .call(&add, vec![gridwise_proto::Value::Int(41)])
        .expect("add runs");
    assert_eq!(out.outputs[0], gridwise_proto::Value::Int(42));
    // A wrong token is refused, and the refusal is logged: without the token's value.
    let mut wrong = g.client_config();
    wrong.token = Some("not-the-token".into());
    wrong.agent_retry_s = 0;
    assert!(gridwise_client::Client::connect(wrong).is_err());
    // Status as every client sees it (`gridwise status --json`).
    let addr = g.agent.addr.clone();
    let (ok, status, err) = gridwise(&["status", "--json", "--agent", &addr, "--token", clients]);
    assert!(ok, "{err}");
    let logs = g.logs();
    for secret in [clients, servers] {
        assert!(!status.contains(secret), "status shows a token:\n{status}");
        assert!(!logs.contains(secret), "a log shows a token:\n{logs}");
    }
}

#[test]
fn a_c_program_given_no_config_file_takes_the_agent_and_token_from_the_environment() {
    let token = "c-env-token";
    let mut flags: Vec<&str> = FAST_HEARTBEATS.to_vec();
    flags.extend(["--client-token", token, "--server-token", "c-env-servers"]);
    let mut g = Grid::agent(&flags);
    g.server("s1", "slots = 2\ncalibrate = false\n");
    g.wait_up(1);
    let source = r#"
#include <stdio.h>
#include "grpc.h"
int main(void) {
    grpc_function_handle_t h;
    int y = 0;
    if (grpc_initialize(NULL) != GRPC_NO_ERROR ||
        grpc_function_handle_default(&h, "add") != GRPC_NO_ERROR ||
        grpc_call(&h, 41, &y) != GRPC_NO_ERROR) {
        fprintf(stderr, "%s\n", gridwise_last_error_message());
        return 1;
    }
    printf("add(41) = %d\n", y);
    grpc_function_handle_destruct(&h);
    grpc_finalize();
    return 0;
}
"#;
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_c(source, dir.path());
    let run = |agent: Option<&str>| {
        let mut cmd = Command::new(&exe);
        cmd.env_remove("GRIDWISE_AGENT")
            .env("GRIDWISE_TOKEN", token);
        if let Some(a) = agent {
            cmd.env("GRIDWISE_AGENT", a);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = run(Some(&g.agent.addr));
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("add(41) = 42"), "{out}");
    let (code, _, err) = run(None);
    assert_eq!(code, Some(1));
    assert!(err.contains("GRIDWISE_AGENT"), "{err}");
}

#[test]
fn a_described_routine_no_entry_provides_is_named_in_the_log_and_by_services_describe() {
    let dir = tempfile::tempdir().unwrap();
    let desc = dir.path().join("mine.toml");
    std::fs::write(
        &desc,
        r#"
[[service]]
name = "shout"
doc = "Upper-cases a string."
args = [{ name = "s", mode = "in", type = "string" }, { name = "y", mode = "out", type = "string" }]

[[service]]
name = "forgotten"
args = [{ name = "n", mode = "in", type = "int" }, { name = "y", mode = "out", type = "int" }]
"#,
    )
    .unwrap();
    let toml = format!(
        "builtins = [\"add\"]\ncalibrate = false\nservices = [{:?}]\n[[command]]\nservice = \"shout\"\nprogram = \"echo\"\nargs = [\"{{s}}\"]\n",
        desc.display().to_string()
    );
    let mut g = Grid::agent(&FAST_HEARTBEATS);
    g.server("s1", &toml);
    g.wait_up(1);
    let addr = g.agent.addr.clone();
    let (ok, out, err) = gridwise(&["services", "--describe", "--agent", &addr]);
    assert!(ok, "{err}");
    assert!(out.contains("Upper-cases a string."), "{out}");
    assert!(
        out.contains("warning: server s1 describes `forgotten`")
            && out.contains("mine.toml")
            && out.contains("[[command]]"),
        "services --describe does not say why `forgotten` is missing:\n{out}"
    );
    let (ok, out, err) = gridwise(&["services", "--agent", &addr]);
    assert!(ok, "{err}");
    assert!(
        out.contains("shout(") && !out.contains("forgotten"),
        "{out}"
    );
    let (ok, out, err) = gridwise(&["status", "--agent", &addr]);
    assert!(ok, "{err}");
    assert!(
        out.contains("1 routine(s) described but not offered"),
        "{out}"
    );
    let logs = g.logs();
    assert!(
        logs.contains("described but not offered") && logs.contains("forgotten"),
        "the server's log says nothing of `forgotten`:\n{logs}"
    );
}

#[test]
fn bench_kernels_without_numpy_skips_only_what_needs_it_and_says_what_to_install() {
    // A Python with nothing installed, as on a fresh machine.
    let dir = tempfile::tempdir().unwrap();
    let venv = dir.path().join("bare");
    let made = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .expect("python3 runs");
    assert!(made.success());
    let python = venv.join("bin/python").display().to_string();
    let (ok, out, err) = gridwise(&[
        "bench", "kernels", "--json", "--n", "64", "--calls", "20", "--python", &python,
    ]);
    assert!(ok, "bench kernels failed without numpy:\n{err}");
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let row = |kind: &str| {
        rows.iter()
            .find(|r| r["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} row in {out}"))
    };
    let skipped = row("python")["skipped"].as_str().unwrap_or_default();
    assert!(
        skipped.contains("numpy") && skipped.contains("install"),
        "{out}"
    );
    assert!(row("command")["noop_p50_us"].as_f64().is_some(), "{out}");
    assert!(row("command")["dgemm_skipped"].is_string(), "{out}");
    for kind in ["builtin", "library"] {
        assert!(
            row(kind)["dgemm_kernel_gflops"].as_f64().unwrap_or(0.0) > 0.0,
            "{out}"
        );
    }
    assert!(err.contains("numpy is not importable"), "{err}");
}
