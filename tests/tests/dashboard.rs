//! The agent's dashboard in a real headless Chromium (Debian's `chromium`, driven over the
//! DevTools protocol by chromiumoxide): the page loads, lists every server of the grid, and
//! updates without a reload when a call runs. A screenshot is left in
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
        assert!(
            Instant::now() < deadline,
            "the page never showed {what} ({js})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
            .window_size(1400, 1100)
            .viewport(Viewport {
                width: 1400,
                height: 1100,
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
