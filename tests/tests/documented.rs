//! Every command the documentation shows, run (issue 32): each `sh` block of the README as a
//! script, on this machine, with the changes a test must make and nothing else (listed in
//! [`SUBSTITUTIONS`]: this build's `gridwise` for `cargo run --release -p gridwise --`, free
//! loopback ports for the hosts and ports of the text); every command in a comment of a file
//! under `deploy/` or `examples/` (and `crates/capi/install.sh`) run here or by the test
//! [`ELSEWHERE`] names. A command the table does not know fails the census: whoever documents
//! a command says where it is run. Commands named inline in the Markdown files' prose are
//! checked for what they name (packages, test targets, the CLI's words), not run: most start
//! benchmarks or daemons that the blocks already run.

use gridwise_e2e::{bin, capi_lib_dir, cargo_build, free_port, gridwise_cli, python_venv};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    gridwise_e2e::repo_root()
}

/// The README's `sh` blocks, in order.
fn readme_blocks() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let mut out = Vec::new();
    let mut block: Option<String> = None;
    for line in text.lines() {
        match &mut block {
            None if line.trim_end() == "```sh" => block = Some(String::new()),
            Some(b) if line.trim_end() == "```" => {
                out.push(std::mem::take(b));
                block = None;
            }
            Some(b) => {
                b.push_str(line);
                b.push('\n');
            }
            None => {}
        }
    }
    out
}

/// The commands of a script: its lines joined where they end in `\`, without comments
/// (trailing ones too) or blank lines.
fn commands(script: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in script.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && pending.is_empty()) {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            pending.push_str(head);
            continue;
        }
        pending.push_str(line);
        let command = strip_comment(&pending).trim().to_string();
        pending.clear();
        if !command.is_empty() {
            out.push(command);
        }
    }
    out
}

/// `line` without a trailing `# …` comment (a `#` after a space, outside quotes).
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    let bytes = line.as_bytes();
    for (i, &c) in bytes.iter().enumerate() {
        match (quote, c) {
            (None, b'\'' | b'"') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, b'#') if i > 0 && bytes[i - 1] == b' ' => return &line[..i],
            _ => {}
        }
    }
    line
}

/// The commands shown in comments of the files under `deploy/` and `examples/` (and the C
/// API's installer): (file, command).
fn commented_commands() -> Vec<(String, String)> {
    let starts = [
        "gridwise ",
        "gridwise-agent ",
        "gridwise-server ",
        "sudo gridwise ",
        "cargo run ",
        "make",
        "./",
        "podman ",
        "docker ",
        "kubectl ",
        "sbatch ",
        "systemctl ",
        "crates/capi/install.sh",
        "PREFIX=",
        "cc ",
    ];
    let mut files = Vec::new();
    for dir in ["deploy", "examples"] {
        walk(&root().join(dir), &mut files);
    }
    files.push(root().join("crates/capi/install.sh"));
    let mut out = Vec::new();
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        let rel = f.strip_prefix(root()).unwrap().display().to_string();
        if rel.ends_with(".md") {
            // A Markdown file's commands are the lines of its code blocks.
            let mut inside = false;
            for line in text.lines() {
                if line.trim_start().starts_with("```") {
                    inside = !inside;
                } else if inside && starts.iter().any(|s| line.trim().starts_with(s)) {
                    out.push((rel.clone(), strip_comment(line.trim()).trim().to_string()));
                }
            }
            continue;
        }
        for line in text.lines() {
            let t = line.trim_start();
            let Some(body) = ["//!", "//", "#"].iter().find_map(|p| t.strip_prefix(p)) else {
                continue;
            };
            let body = body.trim();
            if starts.iter().any(|s| body.starts_with(s)) && !prose(body) {
                out.push((rel.clone(), strip_comment(body).trim().to_string()));
            }
        }
    }
    out
}

/// Whether a comment that starts with "gridwise " is a sentence about gridwise ("gridwise on
/// Kubernetes: …") rather than a command: its next word is neither an option nor one of the
/// command line's words (as `gridwise --help` lists them).
fn prose(body: &str) -> bool {
    let Some(rest) = body.strip_prefix("gridwise ") else {
        return false;
    };
    static WORDS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let words = WORDS.get_or_init(|| {
        let help = Command::new(gridwise_cli()).arg("--help").output().unwrap();
        let help = String::from_utf8_lossy(&help.stdout).into_owned();
        help.lines()
            .skip_while(|l| !l.starts_with("Commands:"))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .collect()
    });
    let next = rest.split_whitespace().next().unwrap_or("");
    !(next.starts_with('-') || words.iter().any(|w| w == next))
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().filter_map(Result::ok) {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// Where a documented command is run, by its beginning: `here` (the README blocks, run by
/// [`the_readme_blocks_run_as_written`], and the files' commands run by
/// [`the_files_commands_run_as_written`]), or the test (file::name) that runs it as it is
/// deployed, with why it is not run here.
const ELSEWHERE: &[(&str, &str, &str)] = &[
    (
        "cargo test --workspace",
        "(.ci/run)",
        "the README's test command: CI runs it on a fresh clone, this test among the rest",
    ),
    (
        "pip install ./python",
        "python_package::the_python_package_installs_and_its_tests_pass",
        "it builds the package with maturin into a virtual environment and runs its tests",
    ),
    (
        "createdb gridwise",
        "agents::what_an_agent_learns_in_postgres_survives_it_and_reaches_a_second_agent",
        "a PostgreSQL server is made for the test (pgtemp) and two agents started on its URL",
    ),
    (
        "GRIDWISE_AGENT_STORE=postgres://",
        "agents::what_an_agent_learns_in_postgres_survives_it_and_reaches_a_second_agent",
        "as above",
    ),
    (
        "gridwise-server --config deploy/two-agents/server.toml",
        "deploy::the_two_agent_examples_agree_with_each_other_and_the_daemons",
        "its agents' host names exist only in the example",
    ),
    (
        "GRIDWISE_AGENT=A1:7000,A2:7000 gridwise status",
        "agents::an_agent_killed_mid_batch_costs_no_call",
        "clients given both agents, one of which is killed",
    ),
    (
        "gridwise --config deploy/two-agents/client.toml status",
        "deploy::the_two_agent_examples_agree_with_each_other_and_the_daemons",
        "its agents' host names exist only in the example",
    ),
    (
        "gridwise server --config deploy/two-agents/server.toml",
        "deploy::the_two_agent_examples_agree_with_each_other_and_the_daemons",
        "as above",
    ),
    (
        "gridwise agent --config deploy/two-agents/agent.toml",
        "deploy::the_two_agent_examples_agree_with_each_other_and_the_daemons",
        "its store is a PostgreSQL URL of the example's",
    ),
    (
        "kubectl ",
        "deploy::kubernetes_manifests_are_complete_and_agree",
        "no cluster here: the manifests are parsed and checked against each other and the daemons",
    ),
    (
        "systemctl ",
        "deploy::systemd_units_verify",
        "no systemd as PID 1 here: the units pass systemd-analyze verify",
    ),
    (
        "podman ",
        "deploy::the_containerfile_builds_a_small_non_root_image",
        "the image is built where podman or docker exists; no container is run (the daemons in it are the ones every other test runs)",
    ),
    (
        "docker ",
        "deploy::the_containerfile_builds_a_small_non_root_image",
        "as above",
    ),
    (
        "sbatch ",
        "deploy::the_slurm_launcher_starts_a_grid_runs_the_program_and_stops_it",
        "no Slurm here: the launcher runs with srun and scontrol shims that start each step locally",
    ),
    (
        "make",
        "c_api::grpc_programs_in_c_run_unchanged_against_a_real_grid",
        "it builds examples/c with its Makefile (GRIDWISE_LIB set to this build's)",
    ),
    (
        "./add client.toml",
        "c_api::grpc_programs_in_c_run_unchanged_against_a_real_grid",
        "as above, each program with a client config",
    ),
    (
        "crates/capi/install.sh",
        "c_api::grpc_programs_in_c_run_unchanged_against_a_real_grid",
        "installed under a PREFIX of the test's, and a program built with pkg-config against it; /usr/local is not for a test",
    ),
    (
        "cc prog.c $(pkg-config --cflags --libs gridwise)",
        "c_api::grpc_programs_in_c_run_unchanged_against_a_real_grid",
        "a program built with pkg-config against the library installed under a PREFIX of the test's",
    ),
    (
        "sudo gridwise testbed up examples/testbeds/star.toml",
        "testbed::testbed_up_runs_a_shipped_topology_and_ctrl_c_takes_it_down",
        "the star, under a name of the test's, Ctrl-C included; the README's two-sites form is run here",
    ),
];

/// What the README's blocks run here, beside the commands as written: a place of this
/// machine for each place of the text, and a shorter run of the 15-minute benchmark.
const SUBSTITUTIONS: &[(&str, &str)] = &[
    ("cargo run --release -p gridwise --", "gridwise"),
    ("sudo ", ""),
    ("0.0.0.0:7000", "127.0.0.1:$AGENT_PORT"),
    ("A:7000", "127.0.0.1:$AGENT_PORT"),
    ("127.0.0.1:7000", "127.0.0.1:$AGENT_PORT"),
    ("0.0.0.0:7100", "127.0.0.1:$SERVER_PORT"),
    ("$(hostname):7100", "127.0.0.1:$SERVER_PORT"),
    ("0.0.0.0:9100", "127.0.0.1:$PORT_A"),
    ("0.0.0.0:9101", "127.0.0.1:$PORT_B"),
    ("127.0.0.1:8080", "127.0.0.1:$PORT_C"),
    // The text elides the rest of a daemon's flags.
    (
        "--dashboard 127.0.0.1:$PORT_C …",
        "--dashboard 127.0.0.1:$PORT_C --listen 127.0.0.1:$AGENT_PORT",
    ),
    (
        "--metrics 127.0.0.1:$PORT_B …",
        "--metrics 127.0.0.1:$PORT_B --listen 127.0.0.1:0 --agent 127.0.0.1:$AGENT_PORT",
    ),
    // The whole benchmark takes 15 minutes; one part of it makes the same CSV.
    (
        "bench predict --csv predictions.csv",
        "bench predict --csv predictions.csv --only dedicated --calls 5",
    ),
    // install.sh builds the library in release unless told where one is (its LIB_DIR).
    (
        "PREFIX=$HOME/.local crates/capi/install.sh",
        "LIB_DIR=$CAPI_LIB PREFIX=$HOME/.local crates/capi/install.sh",
    ),
];

/// What each README block needs that the text around it says is there: a grid already up,
/// the secrets it names, the program it compiles.
fn precondition(block: &str) -> &'static str {
    if block.contains("gridwise call dgesv") {
        "daemon gridwise agent --listen 127.0.0.1:$AGENT_PORT\n\
         daemon gridwise server --config examples/services/server.toml --agent 127.0.0.1:$AGENT_PORT\n\
         servers_up 1\nexport GRIDWISE_AGENT=127.0.0.1:$AGENT_PORT\n"
    } else if block.contains("cholesky_lapack.json") || block.contains("gridwise divide solve") {
        "daemon gridwise agent --listen 127.0.0.1:$AGENT_PORT\nexport GRIDWISE_AGENT=127.0.0.1:$AGENT_PORT\n"
    } else if block.contains("$CLIENTS") {
        "export CLIENTS=client-secret-$RANDOM SERVERS=server-secret-$RANDOM\n"
    } else if block.contains("prog.c") {
        "cp \"$PROG_C\" prog.c\n"
    } else {
        ""
    }
}

/// Helpers every block's script starts with. `daemon` starts a command in the background and
/// waits for its `listening` line; `servers_up N` waits for N servers up at the agent;
/// `expect OUT TEXT` checks a command's `# prints` comment; `until_line FILE TEXT` waits for
/// a line of output.
const PRELUDE: &str = r#"set -euo pipefail
cleanup() { for p in $(jobs -p); do kill -INT "$p" 2>/dev/null || true; done; sleep 0.3; for p in $(jobs -p); do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
STARTED=0
daemon() {
    local out="$LOGS/daemon-$STARTED.out" err="$LOGS/daemon-$STARTED.err"
    STARTED=$((STARTED + 1))
    "$@" >"$out" 2>"$err" &
    local pid=$!
    for _ in $(seq 900); do
        grep -q '^listening ' "$out" 2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || { echo "$* exited:" >&2; cat "$err" >&2; return 1; }
        sleep 0.1
    done
    echo "$* did not start in 90 s" >&2; cat "$err" >&2; return 1
}
servers_up() {
    for _ in $(seq 900); do
        local n
        n=$(gridwise status --json --agent "127.0.0.1:$AGENT_PORT" ${CLIENTS:+--token "$CLIENTS"} 2>/dev/null | grep -o '"state":"up"' | wc -l || true)
        [ "${n:-0}" -ge "$1" ] && return 0
        sleep 0.1
    done
    echo "fewer than $1 server(s) up after 90 s" >&2; return 1
}
expect() { case "$1" in *"$2"*) ;; *) echo "expected \`$2\` in the output: $1" >&2; return 1 ;; esac; }
until_line() {
    for _ in $(seq 1200); do grep -q -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    echo "no \`$2\` in $1 after 120 s:" >&2; cat "$1" >&2; return 1
}
"#;

/// The words of `command` from its program on (environment assignments before it left out).
fn program_words(command: &str) -> Vec<&str> {
    command
        .split_whitespace()
        .skip_while(|w| w.contains('=') && !w.starts_with('-'))
        .collect()
}

fn is_daemon(command: &str) -> bool {
    is_server(command)
        || matches!(
            program_words(command).as_slice(),
            ["gridwise-agent", ..] | ["gridwise", "agent", ..]
        )
}

fn is_server(command: &str) -> bool {
    matches!(
        program_words(command).as_slice(),
        ["gridwise-server", ..] | ["gridwise", "server", ..]
    )
}

/// A README block as the script that runs it here.
fn script_of(block: &str) -> String {
    let mut script = String::from(PRELUDE);
    script.push_str(precondition(block));
    let mut servers = usize::from(block.contains("gridwise call dgesv"));
    for raw in block.lines() {
        let prints = raw
            .split_once("# prints ")
            .map(|(_, p)| p.trim().to_string());
        let ctrl_c = raw.contains("Ctrl-C");
        let mut line = raw.to_string();
        for (from, to) in SUBSTITUTIONS {
            line = line.replace(from, to);
        }
        let trimmed = line.trim();
        let continued = script.trim_end().ends_with('\\');
        if trimmed.starts_with('#') || trimmed.is_empty() {
            script.push_str(&line);
            script.push('\n');
            continue;
        }
        if trimmed.ends_with('\\') {
            // The head of a command continued on the next lines; a daemon's is started as
            // the others are, once its last line is there.
            if !continued && is_daemon(trimmed) {
                script.push_str("daemon ");
            }
            script.push_str(if continued { trimmed } else { &line });
            script.push('\n');
            continue;
        }
        let command = strip_comment(trimmed).trim().trim_end_matches('&').trim();
        if continued {
            script.push_str(command);
            script.push('\n');
            if block_head_is_daemon(&script) && block_head_is_server(&script) {
                servers += 1;
                script.push_str(&format!("servers_up {servers}\n"));
            }
        } else if ctrl_c {
            // It runs until Ctrl-C: it is interrupted once it is up, and must then end well.
            // Once up, the command it prints for the client's host is run too.
            script.push_str(&format!(
                "{command} >\"$LOGS/fg.out\" 2>&1 &\nfg_pid=$!\nuntil_line \"$LOGS/fg.out\" 'Ctrl-C takes everything down'\n\
                 eval \"$(grep -m1 'ip netns exec' \"$LOGS/fg.out\")\"\n\
                 kill -INT $fg_pid\nwait $fg_pid\ncat \"$LOGS/fg.out\"\n"
            ));
        } else if is_daemon(command) {
            script.push_str(&format!("daemon {command}\n"));
            if is_server(command) {
                servers += 1;
                script.push_str(&format!("servers_up {servers}\n"));
            }
        } else if let Some(p) = prints {
            script.push_str(&format!(
                "out=$({command})\nprintf '%s\\n' \"$out\"\nexpect \"$out\" {}\n",
                shell_quote(&p)
            ));
        } else {
            script.push_str(command);
            script.push('\n');
        }
    }
    script
}

/// The first line of the command a continued line completes (the lines since the last
/// complete one), without the `daemon ` this script put before it.
fn block_head(script: &str) -> &str {
    let lines: Vec<&str> = script.lines().collect();
    let mut start = lines.len() - 1;
    while start > 0 && lines[start - 1].trim_end().ends_with('\\') {
        start -= 1;
    }
    lines[start].trim_start()
}

/// Whether that command starts a daemon; a continued daemon line is started in the background
/// like the others.
fn block_head_is_daemon(script: &str) -> bool {
    block_head(script).starts_with("daemon ")
}

/// Whether that command is a server's.
fn block_head_is_server(script: &str) -> bool {
    is_server(block_head(script).trim_start_matches("daemon "))
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The C program the README shows, which its `cc prog.c` block compiles.
fn readme_c_program(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let start = text.find("```c\n").expect("the README shows a C program") + 5;
    let end = start + text[start..].find("```").unwrap();
    let p = dir.join("prog.c");
    std::fs::write(&p, &text[start..end]).unwrap();
    p
}

/// Runs `script` with bash in a folder of its own that sees the repository's `examples`,
/// `deploy` and `crates`, this build's programs first on PATH, within `limit`; its output.
fn run_script(name: &str, script: &str, limit: Duration) -> Result<String, String> {
    let work = tempfile::tempdir().unwrap();
    for d in ["examples", "deploy", "crates"] {
        std::os::unix::fs::symlink(root().join(d), work.path().join(d)).unwrap();
    }
    let logs = work.path().join(".logs");
    std::fs::create_dir_all(&logs).unwrap();
    let home = work.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let programs = gridwise_cli().parent().unwrap().to_path_buf();
    // The Python routines need numpy, which a virtual environment here has.
    let python = python_venv(&["numpy"]);
    let path = format!(
        "{}:{}:{}",
        programs.display(),
        python.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(work.path())
        .env("PATH", path)
        .env("HOME", &home)
        .env("LOGS", &logs)
        .env("AGENT_PORT", free_port().to_string())
        .env("SERVER_PORT", free_port().to_string())
        .env("PORT_A", free_port().to_string())
        .env("PORT_B", free_port().to_string())
        .env("PORT_C", free_port().to_string())
        .env("CAPI_LIB", capi_lib_dir())
        .env(
            "PROG_C",
            readme_c_program(work.path().join(".logs").as_path()),
        )
        .env_remove("GRIDWISE_AGENT")
        .env_remove("GRIDWISE_TOKEN")
        // To a file: a block's output may be larger than a pipe holds while nobody reads it.
        .stdout(std::fs::File::create(logs.join("script.out")).unwrap())
        .stderr(std::process::Stdio::from(
            std::fs::File::options()
                .append(true)
                .open(logs.join("script.out"))
                .unwrap(),
        ))
        .process_group(0)
        .spawn()
        .unwrap();
    let pgid = child.id() as i32;
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // Whatever the script left running goes with it.
    // SAFETY: a signal to the process group this test made.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    let _ = child.wait();
    let text = std::fs::read_to_string(logs.join("script.out")).unwrap_or_default();
    // What failed is at the end; a dgemm's JSON before it is not worth a megabyte of log.
    let mut tail = text.len().saturating_sub(6000);
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    let end = format!("{}{}", if tail > 0 { "…" } else { "" }, &text[tail..]);
    match status {
        Some(s) if s.success() => Ok(text),
        Some(s) => Err(format!(
            "{name} failed ({s}):\n{script}\n--- output:\n{end}"
        )),
        None => Err(format!(
            "{name} did not end within {limit:?}:\n{script}\n--- output:\n{end}"
        )),
    }
}

/// The entry of [`ELSEWHERE`] that runs `command`, if another test does.
fn elsewhere(command: &str) -> Option<&'static (&'static str, &'static str, &'static str)> {
    ELSEWHERE
        .iter()
        .find(|(start, _, _)| command.starts_with(start))
}

#[test]
fn every_documented_command_is_run_by_a_test() {
    // The tests the table names exist (a renamed test would leave its commands unrun).
    let mut sources = String::new();
    for e in std::fs::read_dir(root().join("tests/tests")).unwrap() {
        sources.push_str(&std::fs::read_to_string(e.unwrap().path()).unwrap());
    }
    for (_, test, _) in ELSEWHERE {
        if let Some((_, name)) = test.split_once("::") {
            assert!(
                sources.contains(&format!("fn {name}(")),
                "ELSEWHERE names {test}, which does not exist"
            );
        }
    }
    // The README's: each block is run here unless all of its commands are run elsewhere.
    let blocks = readme_blocks();
    assert!(blocks.len() >= 10, "{} blocks", blocks.len());
    // The files' commands: run here if `FILE_COMMANDS` has them, else elsewhere.
    let mut unknown = Vec::new();
    for (file, command) in commented_commands() {
        let here = FILE_COMMANDS.iter().any(|(c, _)| command.starts_with(c));
        if !here && elsewhere(&command).is_none() {
            unknown.push(format!("{file}: {command}"));
        }
    }
    assert!(
        unknown.is_empty(),
        "documented commands no test runs (run them in FILE_COMMANDS or name the test in ELSEWHERE):\n{}",
        unknown.join("\n")
    );
}

#[test]
fn the_readme_blocks_run_as_written() {
    // The daemons and the C library the blocks use, built before any block's clock starts.
    gridwise_cli();
    bin("gridwise-agent");
    bin("gridwise-server");
    capi_lib_dir();
    let mut failures = Vec::new();
    for (i, block) in readme_blocks().iter().enumerate() {
        let cmds = commands(block);
        if cmds.iter().all(|c| elsewhere(c).is_some()) {
            continue;
        }
        let name = format!("README block {} ({})", i + 1, cmds[0]);
        let script = script_of(block);
        // Only its commands run elsewhere are left out of a block run here.
        let script: String = script
            .lines()
            .filter(|l| elsewhere(l.trim()).is_none())
            .map(|l| format!("{l}\n"))
            .collect();
        eprintln!("running {name} …");
        let t = Instant::now();
        match run_script(&name, &script, Duration::from_secs(300)) {
            Ok(out) => {
                eprintln!("{name}: ok in {:.1} s", t.elapsed().as_secs_f64());
                check_block(block, &out);
            }
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// What a block leaves that its text promises, beyond each command's success.
fn check_block(block: &str, out: &str) {
    let promised = [
        ("-- demo", "demo took"),
        ("testbed up", "taken down"),
        ("gridwise status --agent A:7000", "server(s)"),
        ("gridwise divide rows", "iteration"),
    ];
    for (command, text) in promised {
        if block.contains(command) {
            assert!(
                out.contains(text),
                "`{command}` never said `{text}`:\n{out}"
            );
        }
    }
}

/// Commands in the files' comments run here, each as a script (with the substitutions the
/// README's get, and a grid where the command needs one).
const FILE_COMMANDS: &[(&str, &str)] = &[
    (
        "gridwise-agent --config deploy/agent.toml",
        "daemon gridwise-agent --config deploy/agent.toml --listen 127.0.0.1:$AGENT_PORT --data-dir \"$LOGS/data\"\n\
         gridwise status --agent 127.0.0.1:$AGENT_PORT\n",
    ),
    (
        "gridwise-server --config deploy/server.toml",
        "daemon gridwise-agent --listen 127.0.0.1:$AGENT_PORT\n\
         daemon gridwise-server --config deploy/server.toml --listen 127.0.0.1:$SERVER_PORT --advertise 127.0.0.1:$SERVER_PORT --agent 127.0.0.1:$AGENT_PORT --no-calibrate\n\
         servers_up 1\n",
    ),
    (
        "gridwise --config deploy/client.toml status",
        "daemon gridwise-agent --listen 127.0.0.1:$AGENT_PORT\n\
         sed \"s/agent.example.org:7000/127.0.0.1:$AGENT_PORT/\" deploy/client.toml > client.toml\n\
         gridwise --config client.toml status\n",
    ),
    (
        "gridwise server --config examples/services/server.toml",
        "daemon gridwise agent --listen 127.0.0.1:$AGENT_PORT\n\
         daemon gridwise server --config examples/services/server.toml --agent 127.0.0.1:$AGENT_PORT\n\
         servers_up 1\n\
         out=$(gridwise status --agent 127.0.0.1:$AGENT_PORT)\nprintf '%s\\n' \"$out\"\n\
         case \"$out\" in *'described but not offered'*) echo 'it describes routines it does not offer' >&2; exit 1;; esac\n",
    ),
    (
        "cargo run -p gridwise-examples --example",
        "daemon gridwise agent --listen 127.0.0.1:$AGENT_PORT\n\
         daemon gridwise server --listen 127.0.0.1:0 --agent 127.0.0.1:$AGENT_PORT --no-calibrate\n\
         servers_up 1\n\
         for e in hello async_batch divide; do \"$EXAMPLES/$e\" 127.0.0.1:$AGENT_PORT; done\n",
    ),
    (
        "sudo gridwise testbed up examples/testbeds/two-sites.toml",
        "",
    ),
    ("PREFIX=$HOME/.local crates/capi/install.sh", ""),
    (
        "gridwise sim examples/sim/",
        "gridwise sim examples/sim/small.json\n\
         gridwise sim examples/sim/crossing-bag.json --all\n\
         gridwise sim examples/sim/large.json --policy heft,mct --json\n",
    ),
];

#[test]
fn the_files_commands_run_as_written() {
    gridwise_cli();
    bin("gridwise-agent");
    bin("gridwise-server");
    let examples = cargo_build(&["-p", "gridwise-examples", "--examples"])
        .unwrap()
        .join("examples");
    let mut failures = Vec::new();
    for (command, how) in FILE_COMMANDS {
        if how.is_empty() {
            // The same command is in a README block, run by the test above.
            assert!(
                readme_blocks().iter().any(|b| b.contains(command)),
                "{command} is said to be run with the README's blocks, which do not show it"
            );
            continue;
        }
        let script = format!(
            "{PRELUDE}export EXAMPLES={}\n{how}",
            shell_quote(&examples.display().to_string())
        );
        eprintln!("running `{command}` …");
        if let Err(e) = run_script(command, &script, Duration::from_secs(240)) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The Markdown files whose inline commands are checked.
const MARKDOWN: [&str; 4] = [
    "README.md",
    "docs/ARCHITECTURE.md",
    "docs/DESIGN.md",
    "examples/sim/README.md",
];

/// The commands the prose of the Markdown files names in inline code
/// (`` `gridwise status --json` ``), outside their fenced blocks, line breaks undone.
fn inline_commands() -> Vec<String> {
    MARKDOWN
        .iter()
        .flat_map(|f| inline_commands_of(&std::fs::read_to_string(root().join(f)).unwrap()))
        .collect()
}

fn inline_commands_of(text: &str) -> Vec<String> {
    let mut prose = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            prose.push_str(line);
            prose.push(' ');
        }
    }
    prose
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|s| {
            let program = s.split(' ').find(|w| !w.contains('=')).unwrap_or("");
            ["gridwise", "cargo"].contains(&program) && s.contains(' ')
        })
        .collect()
}

/// Whether a command is a template (`FILE`, `N`, `[--json]`, `…`, `a|b`) rather than one to
/// type as it stands, or only an option's name (`gridwise --config`).
fn is_template(command: &str) -> bool {
    let words: Vec<&str> = command.split(' ').collect();
    if words.len() == 2 && words[1].starts_with("--") {
        return true;
    }
    words.iter().any(|w| {
        w.contains(['[', '…', '|', '<'])
            || (!w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()))
            || w.ends_with("=…")
    })
}

/// The value after `flag` in `words`.
fn flag_value<'a>(words: &[&'a str], flag: &str) -> Option<&'a str> {
    words
        .iter()
        .position(|w| *w == flag)
        .and_then(|i| words.get(i + 1).copied())
}

/// Every inline `cargo test|run -p PKG --test T|--example E` of the Markdown files names a
/// package and target of this workspace, and every inline `gridwise …` that is not a template parses (its words,
/// then `--help`, which clap answers only if all before it were understood). A command that
/// names a crate it has moved out of fails here, as `--test fuzz_decoders` under
/// `gridwise-proto` once did.
#[test]
fn the_docs_inline_commands_name_what_exists() {
    let meta = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(root())
        .output()
        .unwrap();
    assert!(meta.status.success());
    let meta: serde_json::Value = serde_json::from_slice(&meta.stdout).unwrap();
    let target = |package: &str, kind: &str, name: &str| {
        meta["packages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["name"] == package)
            .flat_map(|p| p["targets"].as_array().unwrap())
            .any(|t| t["name"] == name && t["kind"].as_array().unwrap().iter().any(|k| k == kind))
    };
    let packages: Vec<&str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    let cli = gridwise_cli();
    let (mut cargo, mut parsed) = (0, 0);
    let mut wrong = Vec::new();
    for command in inline_commands() {
        let words: Vec<&str> = command.split(' ').filter(|w| !w.contains('=')).collect();
        match words[0] {
            "cargo" => {
                cargo += 1;
                let Some(package) = flag_value(&words, "-p") else {
                    continue;
                };
                if !packages.contains(&package) {
                    wrong.push(format!("{command}: no package {package}"));
                }
                for (flag, kind) in [("--test", "test"), ("--example", "example")] {
                    if let Some(name) = flag_value(&words, flag)
                        && !target(package, kind, name)
                    {
                        wrong.push(format!("{command}: {package} has no {kind} {name}"));
                    }
                }
            }
            _ if is_template(&command) => {}
            _ => {
                parsed += 1;
                let out = Command::new(&cli)
                    .args(&words[1..])
                    .arg("--help")
                    .env_remove("GRIDWISE_AGENT")
                    .env_remove("GRIDWISE_TOKEN")
                    .output()
                    .unwrap();
                if !out.status.success() {
                    wrong.push(format!(
                        "{command}: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                }
            }
        }
    }
    assert!(
        cargo >= 5 && parsed >= 10,
        "{cargo} cargo, {parsed} gridwise commands found"
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
