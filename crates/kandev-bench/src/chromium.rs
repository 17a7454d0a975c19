//! The `reopen` load in a real browser: headless Chromium, driven over
//! WebDriver by chromedriver, opens the task's page as a person does and
//! is timed until the end of the feed is on screen; then it scrolls up to
//! the first message. The JS heap is read from `performance.memory`
//! (precise with `--enable-precise-memory-info`).

use std::{
    net::{SocketAddr, TcpListener},
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context, Result, bail};
use kandev_e2e::Api;
use serde_json::{Value, json};
use tokio::time::Instant;

/// What the browser saw.
#[derive(Debug)]
pub(crate) struct Opened {
    /// From the page's navigation until the turn's end is on screen.
    pub to_end: Duration,
    /// JS heap then, and after scrolling back to the first message.
    pub heap_open_mib: f64,
    pub heap_start_mib: f64,
    /// From the end until every earlier page is loaded by scrolling up.
    pub to_start: Duration,
    /// The first item is the prompt, and every seq was applied once.
    pub exact: bool,
}

/// The page's feed as the bench reads it.
const STATE: &str = "const d = window.kandevDebug; if (!d) return null;
    const items = document.querySelectorAll('[data-testid=feed-item]');
    return { end: !!document.querySelector('[data-kind=turn_end]'), older: d.olderPages, loading: d.loadingPage,
             first: items.length ? items[0].dataset.kind : null, applied: d.eventsApplied, last: d.lastSeq,
             heap: performance.memory ? performance.memory.usedJSHeapSize : 0,
             stick: !!(d.feed && d.feed.stick), pager: !!(d.feed && d.feed.pager), start: d.feed ? d.feed.renderedStart : -1,
             box: (b => b ? [b.scrollTop, b.scrollHeight, b.clientHeight] : null)(document.querySelector('[data-testid=feed]')) };";

struct Chromium {
    driver: Child,
    api: Api,
    session: String,
    _profile: tempfile::TempDir,
}

fn on_path(bin: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(bin))
            .find(|f| f.is_file())
    })
}

impl Chromium {
    /// chromedriver and a headless Chromium; `None` when not installed.
    async fn start() -> Result<Option<Chromium>> {
        let browser = ["chromium", "chromium-browser", "google-chrome"]
            .into_iter()
            .find_map(on_path);
        let (Some(browser), Some(driver)) = (browser, on_path("chromedriver")) else {
            return Ok(None);
        };
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let driver = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("chromedriver starts")?;
        let profile = tempfile::tempdir()?;
        let api = Api {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            token: None,
        };
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome",
            "goog:chromeOptions": {"binary": browser.display().to_string(), "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-component-update",
                "--disable-dev-shm-usage", "--enable-precise-memory-info",
                "--window-size=1400,1000", format!("--user-data-dir={}", profile.path().display())]}}}});
        let deadline = Instant::now() + Duration::from_secs(20);
        let session = loop {
            match api
                .try_send("POST", "/session", Some(caps.to_string()))
                .await
            {
                Ok(r) if r.status == 200 => break r.body["value"]["sessionId"].clone(),
                Ok(r) if Instant::now() > deadline => bail!("no WebDriver session: {}", r.body),
                Err(e) if Instant::now() > deadline => bail!("chromedriver: {e}"),
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        };
        let session = session.as_str().context("session id")?.to_string();
        Ok(Some(Chromium {
            driver,
            api,
            session,
            _profile: profile,
        }))
    }

    /// Ends the WebDriver session, which closes the browser: killing
    /// chromedriver alone leaves the browser it started running.
    async fn quit(&self) {
        let path = format!("/session/{}", self.session);
        match self.api.try_send("DELETE", &path, None).await {
            Ok(r) if r.status == 200 => {}
            Ok(r) => eprintln!("chromium: the session did not end: {} {}", r.status, r.body),
            Err(e) => eprintln!("chromium: the session did not end: {e}"),
        }
    }

    async fn call(&self, method: &str, path: &str, body: Value) -> Result<Value> {
        let path = format!("/session/{}{path}", self.session);
        let r = self
            .api
            .try_send(method, &path, Some(body.to_string()))
            .await;
        let r = r.map_err(|e| anyhow::anyhow!("{path}: {e}"))?;
        if r.status != 200 {
            bail!("{path}: {} {}", r.status, r.body);
        }
        Ok(r.body["value"].clone())
    }

    async fn goto(&self, url: &str) -> Result<()> {
        self.call("POST", "/url", json!({ "url": url }))
            .await
            .map(drop)
    }

    async fn exec(&self, script: &str, args: Value) -> Result<Value> {
        self.call(
            "POST",
            "/execute/sync",
            json!({ "script": script, "args": args }),
        )
        .await
    }

    /// Polls [`STATE`] until `done` holds for it.
    async fn until(&self, secs: u64, what: &str, done: impl Fn(&Value) -> bool) -> Result<Value> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let state = self.exec(STATE, json!([])).await?;
            if done(&state) {
                return Ok(state);
            }
            if Instant::now() > deadline {
                bail!("the browser did not get to {what}: {state}");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn mib(state: &Value) -> f64 {
    state["heap"].as_f64().unwrap_or(0.0) / (1024.0 * 1024.0)
}

/// Opens `task` in Chromium as `user` (its token) through the gateway at
/// `base`; `None` when no browser is installed.
pub(crate) async fn open(
    base: &str,
    token: &str,
    user: &str,
    task: &str,
) -> Result<Option<Opened>> {
    let Some(chromium) = Chromium::start().await? else {
        return Ok(None);
    };
    let opened = measure(&chromium, base, token, user, task).await;
    chromium.quit().await;
    opened.map(Some)
}

/// Opens the task logged in, until the end of its feed is on screen, then
/// scrolls back to its first message.
async fn measure(
    chromium: &Chromium,
    base: &str,
    token: &str,
    user: &str,
    task: &str,
) -> Result<Opened> {
    // Logged in: the UI keeps its token in the tab's sessionStorage.
    chromium.goto(&format!("{base}/")).await?;
    chromium
        .exec(
            "sessionStorage.setItem('kandev.token', arguments[0]); sessionStorage.setItem('kandev.user', arguments[1]);",
            json!([token, user]),
        )
        .await?;
    chromium.goto("about:blank").await?;
    let t0 = Instant::now();
    chromium.goto(&format!("{base}/#/tasks/{task}")).await?;
    let opened = chromium
        .until(120, "the end of the feed", |s| s["end"] == true)
        .await?;
    let to_end = t0.elapsed();
    let t1 = Instant::now();
    let scroll =
        "const box = document.querySelector('[data-testid=feed]'); if (box) box.scrollTop = 0;";
    // Stalled: no page came for a minute.
    let (mut applied, mut moved) = (opened["applied"].clone(), Instant::now());
    let start = loop {
        chromium.exec(scroll, json!([])).await?;
        let s = chromium
            .until(60, "an earlier page", |s| s["loading"] != true)
            .await?;
        if s["older"] != true {
            break s;
        }
        if s["applied"] != applied {
            (applied, moved) = (s["applied"].clone(), Instant::now());
        } else if moved.elapsed() > Duration::from_secs(60) {
            bail!("scrolling back stalled before the first message: {s}");
        }
    };
    let to_start = t1.elapsed();
    Ok(Opened {
        to_end,
        heap_open_mib: mib(&opened),
        heap_start_mib: mib(&start),
        to_start,
        exact: start["first"] == "prompt" && start["applied"] == start["last"],
    })
}
