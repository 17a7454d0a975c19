//! What the browser tests share: the stack (gateway, task service,
//! orchestrator and agent manager in-process, on a fresh Postgres database
//! and a private NATS, with the mock agent in Docker), a headless Chromium
//! over WebDriver, and one helper per job for driving the page.
// Shared by several test binaries, each using some of it.
#![allow(dead_code)]

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use fantoccini::{Client, ClientBuilder, Locator};
use kandev_common::config::ServiceSettings;
use kandev_testkit::{OwnNats, TestDb, free_port};
use serde_json::{Value, json};

mod serve;
use serve::{Service, serve};

pub const ADMIN: &str = "admin";
pub const ADMIN_PASSWORD: &str = "browser-test-password";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn on_path(bin: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(bin))
        .find(|p| p.is_file())
}

// ------------------------------------------------------------------ stack

/// The four services, in-process.
pub struct Stack {
    pub base: String,
    db: TestDb,
    _nats: OwnNats,
    dir: tempfile::TempDir,
    services: Vec<Service>,
}

impl Stack {
    /// A git repository with `README.md` on branch `main`, under the
    /// stack's allowed repository root; its `file://` URL.
    pub fn git_repo(&self, name: &str) -> String {
        let repo = self.dir.path().join("repos").join(name);
        std::fs::create_dir_all(&repo).unwrap();
        std::fs::write(repo.join("README.md"), "# Demo\n\nA test repository.\n").unwrap();
        kandev_testkit::git_init(&repo);
        format!("file://{}", repo.display())
    }

    pub async fn shutdown(self) {
        for service in &self.services {
            service.cancel();
        }
        for service in self.services {
            service.stopped().await;
        }
        kandev_testkit::remove_containers(&self.db.name);
        self.db.drop_db().await;
    }
}

pub async fn start_stack() -> Stack {
    start_stack_with(false).await
}

/// The stack; with `complete_to_review`, a finished run leaves its task in
/// REVIEW instead of COMPLETED.
pub async fn start_stack_with(complete_to_review: bool) -> Stack {
    start_stack_tuned(complete_to_review, |_| {}).await
}

/// [`start_stack_with`], with the orchestrator's settings changed by
/// `tune` (forges, polling) before it starts.
/// A stack service's shared settings: its `defaults` on any port, on the
/// stack's database and NATS, with the service token.
fn on_stack(defaults: ServiceSettings, db: &TestDb, nats: &OwnNats) -> ServiceSettings {
    ServiceSettings {
        database_max_connections: 4,
        ..kandev_testkit::service_settings(defaults, &db.url, &nats.url())
    }
}

pub async fn start_stack_tuned(
    complete_to_review: bool,
    tune: impl FnOnce(&mut kandev_orchestrator::Settings),
) -> Stack {
    tokio::task::spawn_blocking(kandev_testkit::ensure_docker)
        .await
        .unwrap();
    let nats = OwnNats::start().await;
    let db = TestDb::create().await;
    let dir = tempfile::tempdir().unwrap();
    for sub in ["workspaces", "allowed", "home", "repos"] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
    }

    let tasks = kandev_task_service::Settings {
        common: on_stack(kandev_task_service::Settings::default().common, &db, &nats),
        outbox_poll_ms: 100,
        ..Default::default()
    };
    let (tasks_addr, tasks) = serve!(kandev_task_service, tasks, "task service");

    let agents = kandev_agent_manager::Settings {
        common: on_stack(kandev_agent_manager::Settings::default().common, &db, &nats),
        // Its own label, so no other manager on this engine adopts or
        // removes this stack's containers.
        manager_id: db.name.clone(),
        pull_images: false,
        initialize_timeout_secs: 30,
        permission_timeout_secs: 120,
        seq_flush_ms: 100,
        secrets_key: Some("a-secrets-key-for-the-browser-test-stack".into()),
        ..kandev_agent_manager::Settings::rooted_in(dir.path())
    };
    let (agents_addr, agents) = serve!(kandev_agent_manager, agents, "agent manager");

    let mut orch = kandev_orchestrator::Settings {
        common: on_stack(kandev_orchestrator::Settings::default().common, &db, &nats),
        task_service_url: format!("http://{tasks_addr}"),
        agent_manager_url: format!("http://{agents_addr}"),
        feed_flush_ms: 20,
        retry_backoff_ms: 200,
        retry_backoff_max_ms: 1000,
        complete_to_review,
        ..Default::default()
    };
    tune(&mut orch);
    let (orch_addr, orchestrator) = serve!(kandev_orchestrator, orch, "orchestrator");

    let mut gw = kandev_gateway::Settings {
        common: on_stack(kandev_gateway::Settings::default().common, &db, &nats),
        task_service_url: format!("http://{tasks_addr}"),
        agent_manager_url: format!("http://{agents_addr}"),
        orchestrator_url: format!("http://{orch_addr}"),
        jwt_secret: Some("browser-test-jwt-secret-browser-test-jwt-secret".into()),
        admin_username: ADMIN.into(),
        admin_password: Some(ADMIN_PASSWORD.into()),
        ..Default::default()
    };
    gw.rate_limit.login_per_minute = 6000;
    gw.rate_limit.login_burst = 1000;
    gw.rate_limit.api_per_minute = 60_000;
    gw.rate_limit.api_burst = 10_000;
    let (gateway_addr, gateway) = serve!(kandev_gateway, gw, "gateway");

    Stack {
        base: format!("http://{gateway_addr}"),
        db,
        _nats: nats,
        dir,
        // Stopped in this order: the gateway first.
        services: vec![gateway, orchestrator, agents, tasks],
    }
}

// ---------------------------------------------------------------- browser

pub struct Browser {
    pub client: Client,
    driver: Child,
    port: u16,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }

    /// The console's errors since the last call (the browser's log at
    /// level SEVERE: `console.error`, uncaught exceptions, failed loads).
    /// chromedriver serves the log on its legacy endpoint only, which
    /// fantoccini has no command for: asked over plain HTTP.
    pub async fn console_errors(&self) -> Vec<String> {
        let session = self.client.session_id().await.ok().flatten();
        let session = session.expect("a WebDriver session");
        let body = r#"{"type":"browser"}"#;
        let request = format!(
            "POST /session/{session}/se/log HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.port,
            body.len()
        );
        let answer = http_exchange(self.port, &request).await;
        let log: Value = answer
            .split_once("\r\n\r\n")
            .and_then(|(_, body)| serde_json::from_str(body).ok())
            .unwrap_or_else(|| panic!("the browser's log: {answer}"));
        log["value"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or_default().to_string())
            .collect()
    }
}

/// One HTTP/1.1 request to the driver on `port`; the whole answer.
/// chromedriver keeps the connection open: the answer ends where its
/// Content-Length says.
async fn http_exchange(port: u16, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("chromedriver answers");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut answer = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let text = String::from_utf8_lossy(&answer).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.trim().parse::<usize>().ok());
            if length.is_some_and(|n| body.len() >= n) {
                return text;
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("chromedriver answers in time")
            .expect("receive");
        if n == 0 {
            return text;
        }
        answer.extend_from_slice(&buf[..n]);
    }
}

/// chromedriver (and with it Chromium) goes away even when the test fails.
impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Starts chromedriver on a free port and opens a headless Chromium
/// session; `None` (with a notice) when no browser is installed, unless
/// `KANDEV_REQUIRE_BROWSER=1`.
pub async fn start_browser() -> Option<Browser> {
    let required = std::env::var("KANDEV_REQUIRE_BROWSER").is_ok_and(|v| v == "1");
    let chromium = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find_map(on_path);
    let driver = on_path("chromedriver");
    let (Some(chromium), Some(driver_bin)) = (chromium, driver) else {
        let msg = "headless Chromium and chromedriver are needed for the browser test \
                   (apt-get install -y chromium chromium-driver)";
        assert!(
            !required,
            "{msg}; KANDEV_REQUIRE_BROWSER=1 makes this a failure"
        );
        eprintln!("SKIPPED: {msg}");
        return None;
    };
    let port = free_port();
    let driver = Command::new(driver_bin)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let profile = tempfile::tempdir().unwrap();
    let caps = json!({
        "browserName": "chrome",
        "goog:loggingPrefs": {"browser": "ALL"},
        "goog:chromeOptions": {
            "binary": chromium.display().to_string(),
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1400,1000",
                format!("--user-data-dir={}", profile.path().display()),
            ],
        },
    });
    let caps: fantoccini::wd::Capabilities = caps.as_object().unwrap().clone();
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let client = loop {
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        match ClientBuilder::new(connector)
            .capabilities(caps.clone())
            .connect(&url)
            .await
        {
            Ok(c) => break c,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("cannot open a WebDriver session: {e}"),
        }
    };
    Some(Browser {
        client,
        driver,
        port,
        _profile: profile,
    })
}

// ---------------------------------------------------------------- helpers

/// The page's state, for failure messages.
async fn page_dump(c: &Client) -> String {
    c.execute(
        "const t = document.body ? document.body.innerText : ''; \
         return location.href + '\\n' + t.slice(-4000);",
        vec![],
    )
    .await
    .map(|v| v.as_str().unwrap_or_default().to_string())
    .unwrap_or_else(|e| format!("(no page: {e})"))
}

/// Polls `script` (a function body) until it returns something truthy.
pub async fn wait_js(c: &Client, what: &str, secs: u64, script: &str, args: Vec<Value>) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let v = c.execute(script, args.clone()).await.expect("script runs");
        let truthy = match &v {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::Number(n) => n.as_f64() != Some(0.0),
            Value::String(s) => !s.is_empty(),
            _ => true,
        };
        if truthy {
            return v;
        }
        if Instant::now() > deadline {
            let _ = screenshot(c, "failure.png").await;
            panic!(
                "timed out after {secs} s waiting for {what}\n--- page ---\n{}",
                page_dump(c).await
            );
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// Waits until the API says `task` is in `state`: what the page shows may
/// still be the state before a turn the page has not heard start.
pub async fn wait_task_state(c: &Client, task: &str, state: &str, secs: u64) {
    wait_js(
        c,
        &format!("the task {state} (API)"),
        secs,
        "return fetch('/api/v1/tasks/' + arguments[0],
             { headers: { Authorization: 'Bearer ' + sessionStorage.getItem('kandev.token') } })
           .then((r) => r.json()).then((t) => t.state === arguments[1]);",
        vec![json!(task), json!(state)],
    )
    .await;
}

pub async fn js(c: &Client, script: &str, args: Vec<Value>) -> Value {
    c.execute(script, args).await.expect("script runs")
}

pub async fn click(c: &Client, css: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match c.find(Locator::Css(css)).await {
            Ok(el) => match el.click().await {
                Ok(()) => return,
                Err(e) if Instant::now() > deadline => panic!("cannot click {css}: {e}"),
                Err(_) => {}
            },
            Err(e) if Instant::now() > deadline => {
                panic!("no element {css}: {e}\n{}", page_dump(c).await)
            }
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// The element `css`, once there (at most 20 s).
async fn element(c: &Client, css: &str) -> fantoccini::elements::Element {
    c.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no element {css}: {e}"))
}

pub async fn type_into(c: &Client, css: &str, text: &str) {
    let el = element(c, css).await;
    el.clear().await.expect("clear");
    el.send_keys(text).await.expect("type");
}

pub async fn select_value(c: &Client, css: &str, value: &str) {
    let el = element(c, css).await;
    el.select_by_value(value).await.expect("select");
}

/// Sizes the window so that the page's viewport is `width` × `height`
/// (a headless window's frame takes some of its height).
pub async fn set_viewport(c: &Client, width: u32, height: u32) {
    let (mut w, mut h) = (width, height);
    for _ in 0..3 {
        c.set_window_size(w, h).await.expect("resize");
        let inner = js(c, "return [innerWidth, innerHeight];", vec![]).await;
        let (iw, ih) = (inner[0].as_u64().unwrap(), inner[1].as_u64().unwrap());
        if (iw, ih) == (u64::from(width), u64::from(height)) {
            return;
        }
        w = (i64::from(w) + i64::from(width) - iw as i64) as u32;
        h = (i64::from(h) + i64::from(height) - ih as i64) as u32;
    }
    panic!("cannot size the viewport to {width}x{height}");
}

/// A script that returns what sticks out of the window sideways: null when
/// the page has no horizontal scroll, else the widths and the widest
/// offenders.
pub const OVERFLOW_X: &str = "
    const w = innerWidth, doc = document.scrollingElement;
    if (doc.scrollWidth <= w) return null;
    const wide = [...document.querySelectorAll('body *')]
      .filter(e => e.getBoundingClientRect().right > w + 0.5 && e.offsetParent !== null)
      .slice(-5).map(e => e.tagName + '.' + e.className + '[' + (e.dataset.testid || '') + ']');
    return { scrollWidth: doc.scrollWidth, innerWidth: w, wide };";

pub async fn screenshot(c: &Client, name: &str) -> PathBuf {
    let dir = workspace_root().join("target/screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let png = c.screenshot().await.expect("screenshot");
    std::fs::write(&path, png).unwrap();
    eprintln!("screenshot: {}", path.display());
    path
}

/// Runs an async fetch in the page with the session's token; returns the
/// JSON answer (or `{"error": ...}`).
pub async fn api(c: &Client, method: &str, path: &str, body: Value) -> Value {
    c.execute_async(
        r#"const [method, path, body, done] = arguments;
           fetch('/api/v1' + path, {
             method,
             headers: { 'Content-Type': 'application/json',
                        Authorization: 'Bearer ' + sessionStorage.getItem('kandev.token') },
             body: body === null ? undefined : JSON.stringify(body),
           }).then(async (r) => done({ status: r.status, body: await r.json().catch(() => null) }),
                   (e) => done({ status: 0, body: String(e) }));"#,
        vec![json!(method), json!(path), body],
    )
    .await
    .expect("fetch runs")
}

pub const FEED: &str = "[data-testid=feed-item]";

/// A script that is true once the feed shows exactly `n` turn ends.
pub fn turn_ends(n: usize) -> String {
    format!("return document.querySelectorAll('{FEED}[data-kind=turn_end]').length === {n};")
}

// ------------------------------------------------------------- page flows

/// Opens the UI and logs in as the admin; returns once the board list shows.
pub async fn login(c: &Client, base: &str) {
    c.goto(&format!("{base}/")).await.expect("open the UI");
    type_into(c, "[data-testid=login-username]", ADMIN).await;
    type_into(c, "[data-testid=login-password]", ADMIN_PASSWORD).await;
    click(c, "[data-testid=login-submit]").await;
    wait_js(
        c,
        "the board list",
        20,
        "return !!document.querySelector('[data-testid=board-list]');",
        vec![],
    )
    .await;
}

/// Starts the browser, then the stack (see [`start_stack_with`] for
/// `complete_to_review`), and logs in as the admin; `None` without a
/// browser (the test then passes with a notice).
pub async fn start_ui(complete_to_review: bool) -> Option<(Browser, Stack)> {
    let browser = start_browser().await?;
    let stack = Box::pin(start_stack_with(complete_to_review)).await;
    login(&browser.client, &stack.base).await;
    Some((browser, stack))
}

/// Registers the two pickable copies of the mock agent most tests use:
/// `mock-agent-ask` (asks the browser for permissions) and
/// `mock-agent-auto` (approves by itself).
pub async fn register_mock_types(c: &Client) {
    register_mock_type(
        c,
        "mock-agent-ask",
        "Mock agent (asks)",
        json!({"permission_policy": "ask"}),
    )
    .await;
    register_mock_type(c, "mock-agent-auto", "Mock agent", json!({})).await;
}

/// Registers a copy of the built-in (internal) `mock-agent` type as a
/// pickable one, with `changes` (e.g. `{"permission_policy": "ask"}`) on top.
pub async fn register_mock_type(c: &Client, id: &str, name: &str, changes: Value) {
    let types = api(c, "GET", "/agent-types", Value::Null).await;
    let mut t = types["body"]["agent_types"]
        .as_array()
        .and_then(|a| a.iter().find(|t| t["id"] == "mock-agent").cloned())
        .unwrap_or_else(|| panic!("mock-agent is registered: {types}"));
    t["id"] = json!(id);
    t["name"] = json!(name);
    t["internal"] = json!(false);
    if let Some(obj) = t.as_object_mut() {
        obj.remove("missing_env");
        for (k, v) in changes.as_object().into_iter().flatten() {
            obj.insert(k.clone(), v.clone());
        }
    }
    let created = api(c, "POST", "/agent-types", t).await;
    assert!(
        created["status"] == 201 || created["status"] == 200,
        "agent type {id}: {created}"
    );
}

/// How the task dialog is submitted.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Submit {
    /// "Create & start": the orchestrator queues the task at once.
    CreateAndStart,
    /// "Create": the task waits for a start.
    CreateOnly,
}

/// The fields of the task dialog that the tests fill in.
pub struct NewTask<'a> {
    pub title: &'a str,
    pub description: &'a str,
    pub agent: &'a str,
    pub priority: &'a str,
    pub max_retries: Option<&'a str>,
    pub submit: Submit,
}

impl<'a> NewTask<'a> {
    pub fn new(title: &'a str, description: &'a str, agent: &'a str) -> Self {
        NewTask {
            title,
            description,
            agent,
            priority: "0",
            max_retries: None,
            submit: Submit::CreateAndStart,
        }
    }
}

/// Creates a task through the board's dialog; returns its id once its card
/// shows.
pub async fn create_task(c: &Client, t: NewTask<'_>) -> String {
    click(c, "[data-testid=new-task]").await;
    type_into(c, "[data-testid=task-title]", t.title).await;
    type_into(c, "[data-testid=task-description]", t.description).await;
    select_value(c, "[data-testid=task-agent-type]", t.agent).await;
    type_into(c, "[data-testid=task-priority]", t.priority).await;
    if let Some(n) = t.max_retries {
        type_into(c, "[data-testid=task-max-retries]", n).await;
    }
    click(
        c,
        match t.submit {
            Submit::CreateAndStart => "[data-testid=task-dialog-submit]",
            Submit::CreateOnly => "[data-testid=task-dialog-create]",
        },
    )
    .await;
    let id = wait_js(
        c,
        &format!("the card of {:?}", t.title),
        20,
        "const card = [...document.querySelectorAll('[data-testid=column] [data-testid=card]')]
           .find(k => k.querySelector('[data-testid=card-link]').textContent === arguments[0]);
         return card ? card.dataset.taskId : null;",
        vec![json!(t.title)],
    )
    .await;
    id.as_str().unwrap().to_string()
}

/// Creates and starts a task through the board's dialog with the default
/// fields (see [`NewTask::new`]); its id once its card shows.
pub async fn start_task(c: &Client, title: &str, description: &str, agent: &str) -> String {
    create_task(c, NewTask::new(title, description, agent)).await
}

/// Two started cards: `asking` (its agent asks for permission), then one
/// whose agent waits to be cancelled; their ids.
pub async fn start_asker_and_waiter(c: &Client, asking: &str) -> (String, String) {
    let asks = start_task(c, asking, "scenario: permission", "mock-agent-ask").await;
    let cancels = start_task(
        c,
        "Wait for a cancel",
        "scenario: wait-cancel",
        "mock-agent-auto",
    );
    (asks, cancels.await)
}

/// Creates a board through the API; its id.
pub async fn new_board(c: &Client, name: &str) -> String {
    let made = api(c, "POST", "/boards", json!({ "name": name })).await;
    assert_eq!(made["status"], 201, "{made}");
    made["body"]["id"].as_str().unwrap().to_string()
}

/// Creates a task on `board` through the API from `body`; its id.
pub async fn new_task(c: &Client, board: &str, body: Value) -> String {
    let made = api(c, "POST", &format!("/boards/{board}/tasks"), body).await;
    assert_eq!(made["status"], 201, "{made}");
    made["body"]["id"].as_str().unwrap().to_string()
}

/// A new board `board` with a task `title` that the mock agent runs as
/// `scenario: code` on the git repository `repo`, with no retries; the
/// task's id.
pub async fn new_code_task(c: &Client, board: &str, title: &str, repo: &str) -> String {
    let board_id = new_board(c, board).await;
    new_task(
        c,
        &board_id,
        json!({"title": title, "description": "scenario: code",
               "agent_type": "mock-agent", "repository_url": repo, "max_retries": 0}),
    )
    .await
}

/// Opens the task's page afresh (a page load) and waits (up to two
/// minutes) until its run has left it in REVIEW.
pub async fn open_in_review(c: &Client, base: &str, task: &str) {
    c.goto(&format!("{base}/#/tasks/{task}"))
        .await
        .expect("open the task");
    wait_js(c, "the task in review", 120, IN_REVIEW, vec![]).await;
}

/// A script that is true once the task page shows the task in REVIEW.
pub const IN_REVIEW: &str =
    "return document.querySelector('[data-testid=task-state]')?.dataset.state === 'REVIEW';";

/// The CSS selector of a task's card.
pub fn card(id: &str) -> String {
    format!("[data-testid=card][data-task-id=\"{id}\"]")
}

/// A script that is true once the task's card is in the `state` column.
pub fn in_column(state: &str, id: &str) -> String {
    format!(
        "return !!document.querySelector('[data-testid=column][data-state={state}] [data-testid=card][data-task-id=\"{id}\"]');"
    )
}

/// Shows a route of the single-page app (no reload).
pub async fn go(c: &Client, hash: &str) {
    js(
        c,
        "location.hash = arguments[0]; return true;",
        vec![json!(hash)],
    )
    .await;
}

/// Creates a board through the API and shows it; its id.
pub async fn open_new_board(c: &Client, name: &str) -> String {
    let board = api(c, "POST", "/boards", json!({ "name": name })).await;
    let id = board["body"]["id"].as_str().unwrap().to_string();
    open_board(c, &id).await;
    id
}

/// Waits for the agent of the open task to wait for a cancel (the mock
/// agent's `scenario: wait-cancel`), then presses Cancel.
pub async fn cancel_waiting_turn(c: &Client) {
    wait_js(
        c,
        "the agent waiting for a cancel",
        90,
        "return [...document.querySelectorAll('[data-kind=message]')].some(m => m.textContent.includes('Waiting for session/cancel.'))
           && document.querySelector('[data-testid=btn-cancel]')?.disabled === false;",
        vec![],
    )
    .await;
    click(c, "[data-testid=btn-cancel]").await;
}

/// Shows the board `id`, once its eight columns are there.
pub async fn open_board(c: &Client, id: &str) {
    go(c, &format!("#/boards/{id}")).await;
    wait_js(
        c,
        "the board's columns",
        20,
        "return document.querySelectorAll('[data-testid=column][data-state]').length === 8;",
        vec![],
    )
    .await;
}

/// Waits (up to `secs`) until the task's card is in the `state` column.
pub async fn wait_in_column(c: &Client, what: &str, state: &str, id: &str, secs: u64) {
    wait_js(c, what, secs, &in_column(state, id), vec![]).await;
}

/// Waits (up to `secs`) until the server holds task `id` in `state` (what
/// the page did is stored, not only shown).
pub async fn wait_stored_state(c: &Client, what: &str, state: &str, id: &str, secs: u64) {
    kandev_testkit::eventually(secs, what, || async {
        let task = api(c, "GET", &format!("/tasks/{id}"), Value::Null).await;
        (task["body"]["state"] == state).then_some(())
    })
    .await;
}

/// Waits (up to `secs`) until the button `css` is there and enabled.
pub async fn wait_enabled(c: &Client, what: &str, css: &str, secs: u64) {
    let js = "const b = document.querySelector(arguments[0]); return !!b && !b.disabled;";
    wait_js(c, what, secs, js, vec![json!(css)]).await;
}

/// Waits (up to `secs`) until an element matches `css`.
pub async fn wait_for(c: &Client, what: &str, css: &str, secs: u64) {
    let js = "return !!document.querySelector(arguments[0]);";
    wait_js(c, what, secs, js, vec![json!(css)]).await;
}

/// Waits (up to `secs`) until the task page shows the task in `state`.
pub async fn wait_page_state(c: &Client, what: &str, state: &str, secs: u64) {
    let js = "return document.querySelector('[data-testid=task-state]')?.dataset.state === arguments[0];";
    wait_js(c, what, secs, js, vec![json!(state)]).await;
}

// ------------------------------------------------------------- checks

/// Window sizes the layout tests use: a phone, a small window, a desktop.
pub const PHONE: (u32, u32) = (390, 844);
pub const SMALL: (u32, u32) = (800, 900);
pub const DESKTOP: (u32, u32) = (1440, 900);

/// Nothing sticks out of the window sideways on this page.
pub async fn assert_fits(c: &Client, page: &str) {
    let wide = js(c, OVERFLOW_X, vec![]).await;
    assert_eq!(wide, Value::Null, "{page}: the page scrolls sideways");
}

/// The page logged no error to the browser's console.
pub async fn assert_no_console_errors(browser: &Browser) {
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:#?}");
}

/// Asserts that the page logged no console error, then closes the browser
/// and stops the stack: the end of a test.
pub async fn finish_clean(browser: Browser, stack: Stack) {
    assert_no_console_errors(&browser).await;
    finish(browser, stack).await;
}

/// Closes the browser and stops the stack: the end of a test.
pub async fn finish(browser: Browser, stack: Stack) {
    browser.close().await;
    stack.shutdown().await;
}

// ------------------------------------------------------------- keyboard

/// WebDriver key codes, for [`press`].
pub const TAB: &str = "\u{E004}";
pub const ENTER: &str = "\u{E007}";
pub const ESCAPE: &str = "\u{E00C}";
pub const ARROW_DOWN: &str = "\u{E015}";
/// Control down, Enter, then every modifier up.
pub const CTRL_ENTER: &str = "\u{E009}\u{E007}\u{E000}";

/// Types `keys` into whatever has the focus, as a person at a keyboard.
pub async fn press(c: &Client, keys: &str) {
    c.active_element()
        .await
        .expect("a focused element")
        .send_keys(keys)
        .await
        .unwrap_or_else(|e| panic!("cannot press {keys:?}: {e}"));
}
