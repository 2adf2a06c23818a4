//! The agent's dashboard in a real headless Chromium (Debian's `chromium`, driven over the
//! DevTools protocol by chromiumoxide), in a 1280 × 800 window: the page loads, lists every
//! server of the grid, updates without a reload when a call runs, cuts nothing off, puts a
//! time axis with ticks on every timeline, keeps failures apart from predictions, labels a
//! graph's tasks, and follows graphs and divisible jobs to their end. A screenshot is left in
//! `target/screenshots/dashboard.png`.

use chromiumoxide::browser::{Browser, BrowserConfig};
use chromiumoxide::handler::viewport::Viewport;
use chromiumoxide::page::ScreenshotParams;
use futures::StreamExt;
use gridwise_e2e::{FAST_HEARTBEATS, Grid};
use gridwise_proto::Value;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn chromium() -> PathBuf {
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in std::env::var("PATH").unwrap_or_default().split(':') {
            let p = PathBuf::from(dir).join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "no Chromium on PATH: `apt-get install chromium` (.ci/run installs it); the dashboard is tested in a real browser"
    );
}

async fn number(page: &chromiumoxide::Page, js: &str) -> f64 {
    page.evaluate(js)
        .await
        .ok()
        .and_then(|r| r.into_value::<f64>().ok())
        .unwrap_or(f64::NAN)
}

async fn until(page: &chromiumoxide::Page, js: &str, what: &str) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = number(page, js).await;
        if v.is_finite() && v > 0.0 {
            return v;
        }
        if Instant::now() > deadline {
            let text: String = page
                .evaluate("document.querySelector('main').innerText")
                .await
                .ok()
                .and_then(|r| r.into_value().ok())
                .unwrap_or_default();
            panic!("the page never showed {what} ({js}); it shows:\n{text}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What the page looks like, as one JSON object: its width, every element that overflows its
/// box sideways, the ticks of each timeline, the predictions' stroke colours, the task labels,
/// the graph legend, the progress view's text, and whether any figure is in e-notation.
const LAYOUT: &str = r##"(() => {
  const cut = [];
  for (const e of document.querySelectorAll("section, section *")) {
    if (e.closest("svg") && e.tagName !== "svg") continue;
    if (e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX !== "visible") cut.push(e.id || e.tagName);
    const r = e.getBoundingClientRect();
    if (r.right > document.documentElement.clientWidth + 1) cut.push((e.id || e.tagName) + " past the window");
  }
  const ticks = {};
  for (const id of ["gantt", "graphs", "utilisation", "errors"]) ticks[id] = document.querySelectorAll(`#${id} line.tick`).length;
  return {
    page_width: document.documentElement.clientWidth,
    cut_off: [...new Set(cut)],
    ticks,
    predicted_strokes: [...new Set([...document.querySelectorAll("#gantt rect.predicted")].map((r) => r.getAttribute("stroke")))],
    task_labels: [...document.querySelectorAll("#graphs text.task-label")].map((t) => t.textContent),
    graph_legend: document.querySelector("#graphs").previousElementSibling.textContent,
    progress: document.querySelector("#progress").textContent,
    exponents: /\d[eE][+-]\d/.test(document.querySelector("main").innerText),
  };
})()"##;

/// A graph of three dgemm (named, so their labels can be looked for), a divisible dgemm over
/// rows, a call that fails, and a call a hundred times longer than the others; the job's
/// number of parts.
fn work(client: &gridwise_client::Client) -> usize {
    let m = |v: &[f64]| Value::matrix_f64(2, 2, v);
    let dims = || {
        vec![
            Value::Int(2).into(),
            Value::Int(2).into(),
            Value::Int(2).into(),
        ]
    };
    let mut graph = client.graph();
    let mut args = dims();
    args.extend([m(&[1., 2., 3., 4.]).into(), m(&[1., 0., 0., 1.]).into()]);
    let top = graph.call_named("top", "dgemm", args);
    let mut args = dims();
    args.extend([top.output(0), m(&[0., 1., 1., 0.]).into()]);
    let left = graph.call_named("left", "dgemm", args);
    let mut args = dims();
    args.extend([left.output(0), top.output(0)]);
    graph.call_named("bottom", "dgemm", args);
    graph.run().expect("the graph runs");

    let dgemm = client.function_handle_default("dgemm").unwrap();
    let spec = gridwise_client::DivideSpec {
        unit_param: "m".into(),
        sizes: vec![("n".into(), 8), ("k".into(), 8)],
        all: true,
        ..gridwise_client::DivideSpec::default()
    };
    let rows = |_: u64, units: u64| {
        let m = units as usize;
        vec![
            Value::Int(m as i64),
            Value::Int(8),
            Value::Int(8),
            Value::matrix_f64(m as u64, 8, &vec![1.0; m * 8]),
            Value::matrix_f64(8, 8, &[0.5; 64]),
        ]
    };
    let job = client
        .divide(&dgemm, 400, &spec, &rows)
        .expect("the job runs");

    let fail = client.function_handle_default("fail").unwrap();
    assert!(
        client
            .call(&fail, vec![Value::Str("on purpose".into())])
            .is_err()
    );
    let sleep = client.function_handle_default("sleep").unwrap();
    client.call(&sleep, vec![Value::Int(1)]).unwrap();
    let add = client.function_handle_default("add").unwrap();
    for i in 0..5 {
        client.call(&add, vec![Value::Int(i)]).unwrap();
    }
    job.parts.len()
}

#[test]
fn the_dashboard_shows_every_server_and_updates_live_in_chromium() {
    let mut args = FAST_HEARTBEATS.to_vec();
    args.extend(["--dashboard", "127.0.0.1:0"]);
    let mut g = Grid::agent(&args);
    g.server("alpha", "slots = 2\ncalibrate = false\n");
    g.server("beta", "slots = 2\ncalibrate = false\n");
    g.wait_up(2);
    let at = g
        .logged_addr("agent.log", "dashboard at /")
        .expect("the agent logs the dashboard");
    let url = format!("http://{at}/");
    let client = g.client();
    let add = client.function_handle_default("add").unwrap();
    client.call(&add, vec![Value::Int(1)]).unwrap();

    let profile = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let shot = rt.block_on(async {
        let config = BrowserConfig::builder()
            .chrome_executable(chromium())
            .no_sandbox()
            .new_headless_mode()
            .user_data_dir(profile.path())
            .window_size(1280, 800)
            .viewport(Viewport {
                width: 1280,
                height: 800,
                ..Viewport::default()
            })
            .arg("--disable-gpu")
            .arg("--disable-dev-shm-usage")
            .launch_timeout(Duration::from_secs(60))
            .build()
            .expect("a browser config");
        let (mut browser, mut handler) = Browser::launch(config).await.expect("Chromium starts");
        let events = tokio::spawn(async move { while handler.next().await.is_some() {} });
        let page = browser
            .new_page(url.as_str())
            .await
            .expect("the page opens");

        // Every server of the grid, by name.
        until(
            &page,
            "document.querySelectorAll('#servers tbody tr').length >= 2 ? 1 : 0",
            "two servers",
        )
        .await;
        let names: Vec<String> = page
            .evaluate(
                "[...document.querySelectorAll('#servers tbody tr')].map(r => r.dataset.server)",
            )
            .await
            .unwrap()
            .into_value()
            .unwrap();
        assert!(
            names.contains(&"alpha".to_string()) && names.contains(&"beta".to_string()),
            "{names:?}"
        );
        let ranked = until(
            &page,
            "Number(document.body.dataset.ranked)",
            "the calls ranked",
        )
        .await;
        let bars = number(
            &page,
            "document.querySelectorAll('#gantt rect.call').length",
        )
        .await;

        // A call runs; the page (not reloaded) shows it.
        // (The blocking client refuses to run on an async runtime's thread: a plain one.)
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..3 {
                    client.call(&add, vec![Value::Int(i)]).unwrap();
                }
            });
        });
        let js = format!(
            "Number(document.body.dataset.ranked) >= {} ? 1 : 0",
            ranked + 3.0
        );
        until(&page, &js, "the new calls ranked").await;
        let js = format!("document.querySelectorAll('#gantt rect.call').length > {bars} ? 1 : 0");
        until(&page, &js, "the new calls in the Gantt").await;

        // A long call among short ones, a failure, a graph and a divisible job.
        let parts = std::thread::scope(|s| s.spawn(|| work(&client)).join().unwrap());
        // Every call reported on the page: 4 adds, the graph's 3, the job's parts, the
        // failure, the sleep and 5 adds.
        let js = format!(
            "Number(document.body.dataset.calls) >= {} ? 1 : 0",
            14 + parts
        );
        until(&page, &js, "every call").await;
        until(
            &page,
            "document.querySelectorAll('#progress tr.job').length >= 2 ? 1 : 0",
            "the graph and the divisible job in the progress view",
        )
        .await;
        until(
            &page,
            "[...document.querySelectorAll('#progress tr.job')].every(r => r.textContent.includes('finished')) ? 1 : 0",
            "every plan finished",
        )
        .await;
        until(
            &page,
            "document.querySelectorAll('#gantt rect.failed').length",
            "the failed call",
        )
        .await;
        until(
            &page,
            "document.querySelectorAll('#graphs rect.ran').length >= 3 ? 1 : 0",
            "the graph's calls as they ran",
        )
        .await;
        let layout: serde_json::Value = page
            .evaluate(LAYOUT)
            .await
            .unwrap()
            .into_value()
            .unwrap();
        assert_eq!(layout["page_width"], 1280, "{layout}");
        assert!(
            layout["cut_off"].as_array().unwrap().is_empty(),
            "cut off at 1280 px: {layout}"
        );
        for chart in ["gantt", "graphs", "utilisation", "errors"] {
            assert!(
                layout["ticks"][chart].as_u64().unwrap_or(0) >= 2,
                "the {chart} timeline has no time axis with ticks: {layout}"
            );
        }
        // Failure red is failure's alone: predictions are outlined in another colour.
        let predicted = layout["predicted_strokes"].as_array().unwrap();
        assert!(!predicted.is_empty(), "{layout}");
        assert!(
            predicted.iter().all(|c| c != "#b3261e" && c != "#e45756"),
            "{layout}"
        );
        assert!(
            layout["task_labels"].as_array().unwrap().iter().any(|t| t == "top"),
            "the graph's tasks are not labelled: {layout}"
        );
        assert!(
            layout["graph_legend"].as_str().unwrap().contains("planned")
                && layout["graph_legend"].as_str().unwrap().contains("ran"),
            "{layout}"
        );
        assert!(
            layout["progress"].as_str().unwrap().contains("divide dgemm"),
            "{layout}"
        );
        // One format per kind of figure: no exponents anywhere on the page.
        assert!(
            !layout["exponents"].as_bool().unwrap(),
            "a figure in e-notation: {layout}"
        );
        let png = page
            .screenshot(ScreenshotParams::builder().full_page(true).build())
            .await
            .expect("a screenshot");
        browser.close().await.ok();
        browser.wait().await.ok();
        events.abort();
        png
    });
    assert!(shot.starts_with(b"\x89PNG"), "a PNG");
    let (target, _) = gridwise_e2e::target_dir().unwrap();
    let dir = target.join("../screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("dashboard.png");
    std::fs::write(&path, &shot).unwrap();
    println!("dashboard screenshot: {}", path.display());
}
