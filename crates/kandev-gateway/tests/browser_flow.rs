//! Issue 40, items 3, 4, 6 and 10 and the permission prompt, walked in
//! headless Chromium on the real stack (see `support`): a finished run
//! raises a notification and counts in the tab's title, from another
//! board's page too; a permission answer says who gave it ("by you", or the
//! other user's name), after a reload too, and the prompt shows the write
//! it asks for; a follow-up sent during a turn is queued, cancellable and
//! editable, survives a reload and goes when the turn ends; a task in
//! review with nothing to review is marked done from its page. Each at a
//! phone's (390×844) and a desktop's (1440×900) size where it is about
//! layout: no sideways scroll, no console error. Waits on conditions,
//! never on time.
//!
//! Screenshots go to `<workspace>/target/screenshots/flow-*.png`.

mod support;

use fantoccini::{Client, Locator};
use serde_json::{Value, json};
use support::*;

/// The open permission request's Allow button.
const ALLOW: &str = "[data-kind=permission_request][data-state=open] [data-testid=permission-option][data-option-id=allow-once]";

/// The stack (finished runs go to review with `review`) and a logged-in
/// browser with the pickable mock agent types.
async fn setup(review: bool) -> Option<(Browser, Stack)> {
    let (browser, stack) = start_ui(review).await?;
    register_mock_types(&browser.client).await;
    set_viewport(&browser.client, DESKTOP.0, DESKTOP.1).await;
    Some((browser, stack))
}

/// Shows the task's page, once its title is there.
async fn open_task(c: &Client, id: &str) {
    go(c, &format!("#/tasks/{id}")).await;
    wait_js(
        c,
        "the task page",
        20,
        "return location.hash.endsWith(arguments[0]) && !!document.querySelector('[data-testid=task-state][data-state]');",
        vec![json!(id)],
    )
    .await;
}

/// Nothing sticks out sideways, at a phone's, a small window's and a
/// desktop's size; a screenshot of each. Ends at the desktop's size.
async fn fits_at_every_size(c: &Client, name: &str) {
    for (width, height) in [PHONE, SMALL, DESKTOP] {
        set_viewport(c, width, height).await;
        let wide = js(c, OVERFLOW_X, vec![]).await;
        assert_eq!(wide, Value::Null, "{name} at {width} px scrolls sideways");
        screenshot(c, &format!("flow-{name}-{width}.png")).await;
    }
}

/// A fetch in the page as another user (logged in with `password`); the
/// JSON answer as [`api`] gives it.
async fn api_as(c: &Client, user: (&str, &str), method: &str, path: &str, body: Value) -> Value {
    c.execute_async(
        r#"const [username, password, method, path, body, done] = arguments;
           fetch('/api/v1/auth/login', { method: 'POST', headers: { 'Content-Type': 'application/json' },
             body: JSON.stringify({ username, password }) })
             .then(r => r.json())
             .then(({ token }) => fetch('/api/v1' + path, { method,
               headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + token },
               body: body === null ? undefined : JSON.stringify(body) }))
             .then(async (r) => done({ status: r.status, body: await r.json().catch(() => null) }),
                   (e) => done({ status: 0, body: String(e) }));"#,
        vec![json!(user.0), json!(user.1), json!(method), json!(path), body],
    )
    .await
    .expect("fetch runs")
}

async fn task_state(c: &Client, id: &str) -> Value {
    api(c, "GET", &format!("/tasks/{id}"), Value::Null).await["body"]["state"].clone()
}

// ---------------------------------------------------------------- item 3

/// A stand-in for the browser's `Notification`, already allowed: keeps the
/// notifications raised.
const GRANTED_NOTIFICATIONS: &str = "
    window.__notify = { shown: [] };
    window.Notification = class {
      constructor(title, options) { window.__notify.shown.push({ title, body: options && options.body }); }
      static requestPermission() { return Promise.resolve('granted'); }
    };
    window.Notification.permission = 'granted';
    window.kandevNotifier.refresh();
    return true;";

/// Runs of another board finish while the person reads a task: one goes to
/// review, one (nothing to review) completes; each raises a notification
/// and the title counts both; opening each clears its mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_finished_run_notifies_and_counts_in_the_title() {
    let Some((browser, stack)) = setup(true).await else {
        return;
    };
    let c = &browser.client;
    js(c, GRANTED_NOTIFICATIONS, vec![]).await;
    let here = new_board(c, "Here").await;
    let reading = new_task(
        c,
        &here,
        json!({"title": "Read me", "description": "Nothing runs here."}),
    )
    .await;
    open_task(c, &reading).await;

    let there = new_board(c, "There").await;
    let repo = stack.git_repo("notify");
    let reviewed = new_task(
        c,
        &there,
        json!({"title": "Review me", "description": "scenario: code",
               "agent_type": "mock-agent-auto", "repository_url": repo, "max_retries": 0}),
    )
    .await;
    let answered = new_task(
        c,
        &there,
        json!({"title": "Answer me", "description": "scenario: echo done",
               "agent_type": "mock-agent-auto", "max_retries": 0}),
    )
    .await;
    let counted = wait_js(
        c,
        "both finished runs notified and counted in the title",
        180,
        "const titles = window.__notify.shown.map(n => n.title);
         return document.title.startsWith('(2) ') && titles.includes('Review me is ready for review')
           && titles.includes('Answer me completed') && document.title;",
        vec![],
    )
    .await;
    assert_eq!(counted, json!("(2) Read me · Kandev"));
    assert_eq!(task_state(c, &reviewed).await, "REVIEW");
    assert_eq!(task_state(c, &answered).await, "COMPLETED");
    fits_at_every_size(c, "notified").await;

    // Looking at a task clears its mark.
    open_task(c, &reviewed).await;
    wait_js(
        c,
        "one left to look at",
        20,
        "return document.title === '(1) Review me · Kandev';",
        vec![],
    )
    .await;
    open_task(c, &answered).await;
    wait_js(
        c,
        "nothing left to look at",
        20,
        "return document.title === 'Answer me · Kandev';",
        vec![],
    )
    .await;
    finish_clean(browser, stack).await;
}

// ------------------------------------------------ item 4, permission prompt

/// The open permission prompt's write: its path, whether the file is new,
/// and its lines as shown.
const WRITE_SHOWN: &str = "
    const p = document.querySelector('[data-kind=permission_request][data-state=open]');
    const w = p && p.querySelector('[data-testid=permission-write]');
    if (!w) return false;
    return { path: w.querySelector('[data-testid=permission-write-path]').textContent,
             newFile: w.textContent.includes('new file'),
             lines: [...w.querySelectorAll('[data-testid=permission-write-line]')]
               .map(l => l.dataset.op + l.querySelector('.code').textContent),
             html: w.querySelector('script, b') !== null };";

/// Who answered the last permission request, once it is answered.
const ANSWERED_BY: &str = "
    const all = [...document.querySelectorAll('[data-kind=permission_request]')];
    const p = all[all.length - 1];
    const by = p && p.querySelector('[data-testid=permission-by]');
    return !!p && p.dataset.state === 'answered' && !!by && [p.dataset.answeredBy, by.textContent];";

/// Answers the open permission request of `task` as another user, through
/// a stream of their own (their token), as their browser would.
const ANSWER_AS: &str = r#"
    const [taskId, username, password, done] = arguments;
    const p = document.querySelector('[data-kind=permission_request][data-state=open]');
    fetch('/api/v1/auth/login', { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ username, password }) }).then(r => r.json()).then(({ token }) => {
      const ws = new WebSocket(`ws://${location.host}/api/v1/orchestrator/tasks/${taskId}/stream?after=1000000000`,
        ['kandev.bearer', token]);
      ws.onopen = () => ws.send(JSON.stringify({ type: 'permission', request_id: p.dataset.requestId,
        option_id: 'allow-once', id: 'theirs' }));
      ws.onmessage = (m) => { const f = JSON.parse(m.data); if (f.id === 'theirs') { ws.close(); done(f); } };
      ws.onerror = () => done({ type: 'error', message: 'the socket failed' });
    }, (e) => done({ type: 'error', message: String(e) }));"#;

/// The prompt shows the file a write asks for and its new lines; an answer
/// given here says "by you", after a reload too; another user's answer
/// names them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn permission_prompts_show_the_write_and_who_answered() {
    let Some((browser, stack)) = setup(false).await else {
        return;
    };
    let c = &browser.client;
    const BOB: (&str, &str) = ("bob", "bob-browser-password");
    let made = api(
        c,
        "POST",
        "/users",
        json!({"username": BOB.0, "password": BOB.1}),
    )
    .await;
    assert!(made["status"] == 201 || made["status"] == 200, "{made}");
    let board = new_board(c, "Asks").await;
    let mine = new_task(
        c,
        &board,
        json!({"title": "Ask me", "description": "scenario: permission mine.txt",
               "agent_type": "mock-agent-ask", "max_retries": 0}),
    )
    .await;
    // Bob's task on Bob's board: his run, which the admin may watch.
    let bobs = api_as(c, BOB, "POST", "/boards", json!({"name": "Bob's"})).await;
    assert_eq!(bobs["status"], 201, "{bobs}");
    let path = format!("/boards/{}/tasks", bobs["body"]["id"].as_str().unwrap());
    let theirs = api_as(
        c,
        BOB,
        "POST",
        &path,
        json!({"title": "Ask Bob", "description": "scenario: permission theirs.txt",
               "agent_type": "mock-agent-ask", "max_retries": 0}),
    )
    .await;
    assert_eq!(theirs["status"], 201, "{theirs}");
    let theirs = theirs["body"]["id"].as_str().unwrap().to_string();
    open_task(c, &mine).await;
    let write = wait_js(c, "the write the prompt asks for", 120, WRITE_SHOWN, vec![]).await;
    assert!(
        write["path"].as_str().unwrap().ends_with("/mine.txt"),
        "{write}"
    );
    assert_eq!(
        write["lines"],
        json!(["+Written by kandev-mock-agent after permission was granted."]),
        "{write}"
    );
    assert_eq!(write["newFile"], true, "{write}");
    assert_eq!(write["html"], false, "{write}");
    fits_at_every_size(c, "permission-write").await;

    click(c, ALLOW).await;
    let by = wait_js(c, "the answer, by you", 60, ANSWERED_BY, vec![]).await;
    assert_eq!(by, json!(["you", " — by you"]));
    c.refresh().await.expect("reload");
    let by = wait_js(c, "the answer after a reload", 60, ANSWERED_BY, vec![]).await;
    assert_eq!(by, json!(["you", " — by you"]), "the server says who");

    // Bob answers the other one: the page names him.
    open_task(c, &theirs).await;
    wait_js(
        c,
        "the other prompt open",
        120,
        "return !!document.querySelector(arguments[0]);",
        vec![json!(ALLOW)],
    )
    .await;
    let ack = c
        .execute_async(ANSWER_AS, vec![json!(theirs), json!(BOB.0), json!(BOB.1)])
        .await
        .expect("the other user's answer");
    assert_eq!(ack["type"], "ack", "{ack}");
    let by = wait_js(c, "the answer, by Bob", 60, ANSWERED_BY, vec![]).await;
    assert_eq!(by, json!(["person", " — by bob"]));
    screenshot(c, "flow-permission-by-bob.png").await;
    finish_clean(browser, stack).await;
}

// ---------------------------------------------------------------- item 6

/// The follow-ups shown as queued: [text, what the badge says].
const QUEUED: &str = "
    return [...document.querySelectorAll('[data-testid=pending-prompt]')].map(p =>
      [p.querySelector('[data-testid=pending-prompt-text]')?.textContent,
       p.querySelector('[data-testid=pending-prompt-state]')?.textContent]);";

async fn queued(c: &Client) -> Value {
    js(c, QUEUED, vec![]).await
}

async fn wait_queued(c: &Client, what: &str, want: Value) {
    wait_js(
        c,
        what,
        30,
        &format!("const q = (() => {{ {QUEUED} }})(); return JSON.stringify(q) === arguments[0];"),
        vec![json!(want.to_string())],
    )
    .await;
}

/// Sends the prompt box with Ctrl+Enter, as a person at a keyboard does.
async fn ctrl_enter(c: &Client) {
    let input = c
        .find(Locator::Css("[data-testid=prompt-input]"))
        .await
        .expect("the prompt box");
    // Control down, Enter, then every modifier up.
    input
        .send_keys("\u{E009}\u{E007}\u{E000}")
        .await
        .expect("Ctrl+Enter");
}

/// A follow-up sent during a turn is queued, said so, cancellable; another
/// is queued, edited, kept over a reload, and sent when the turn ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follow_up_sent_during_a_turn_is_queued_until_it_ends() {
    let Some((browser, stack)) = setup(false).await else {
        return;
    };
    let c = &browser.client;
    let board = new_board(c, "Queue").await;
    let task = new_task(
        c,
        &board,
        json!({"title": "Long turn", "description": "scenario: slow 160 250",
               "agent_type": "mock-agent-auto", "max_retries": 0}),
    )
    .await;
    open_task(c, &task).await;
    wait_js(
        c,
        "the turn under way",
        120,
        "return [...document.querySelectorAll('[data-kind=message]')].some(m => m.textContent.includes('chunk 3/160'));",
        vec![],
    )
    .await;

    // The box says what sending now does; Ctrl+Enter queues.
    type_into(c, "[data-testid=prompt-input]", "Say: cancel me").await;
    let says = wait_js(
        c,
        "the box offering to queue",
        20,
        "const b = document.querySelector('[data-testid=prompt-send]');
         const hint = document.querySelector('[data-testid=prompt-hint]');
         return b.textContent === 'Queue' && !b.disabled && !hint.hidden && hint.textContent;",
        vec![],
    )
    .await;
    assert!(
        says.as_str()
            .unwrap()
            .contains("sent when it finishes this turn"),
        "{says}"
    );
    ctrl_enter(c).await;
    let waits = "Queued — sent when the agent finishes this turn";
    wait_queued(
        c,
        "the follow-up queued",
        json!([["Say: cancel me", waits]]),
    )
    .await;
    fits_at_every_size(c, "queued").await;

    // Cancelled: it is gone, here and on the server.
    click(c, "[data-testid=pending-prompt-cancel]").await;
    wait_queued(c, "the follow-up cancelled", json!([])).await;
    let held = api(
        c,
        "GET",
        &format!("/orchestrator/tasks/{task}/pending-prompts"),
        Value::Null,
    )
    .await;
    assert_eq!(held["body"], json!({"pending_prompts": []}), "{held}");

    // Another, edited before it goes, kept over a reload.
    type_into(c, "[data-testid=prompt-input]", "Say: the queued one ran").await;
    click(c, "[data-testid=prompt-send]").await;
    wait_queued(
        c,
        "the second follow-up queued",
        json!([["Say: the queued one ran", waits]]),
    )
    .await;
    click(c, "[data-testid=pending-prompt-edit]").await;
    type_into(
        c,
        "[data-testid=pending-prompt-input]",
        "Say: the edited one ran",
    )
    .await;
    click(c, "[data-testid=pending-prompt-save]").await;
    wait_queued(
        c,
        "the follow-up edited",
        json!([["Say: the edited one ran", waits]]),
    )
    .await;
    c.refresh().await.expect("reload");
    wait_queued(
        c,
        "the follow-up kept over a reload",
        json!([["Say: the edited one ran", waits]]),
    )
    .await;
    assert_eq!(
        task_state(c, &task).await,
        "IN_PROGRESS",
        "the turn still runs"
    );

    // The turn ends: it goes, the agent answers it, the queue empties.
    wait_js(
        c,
        "the queued follow-up sent and answered",
        180,
        "const prompts = [...document.querySelectorAll('[data-kind=prompt]')].map(p => p.textContent);
         const said = [...document.querySelectorAll('[data-kind=message]')].some(m => m.textContent.includes('Say: the edited one ran'));
         return prompts.some(p => p.includes('Say: the edited one ran')) && said
           && document.querySelectorAll('[data-testid=pending-prompt]').length === 0;",
        vec![],
    )
    .await;
    wait_js(c, "two turns ended", 60, &turn_ends(2), vec![]).await;
    let prompts = js(
        c,
        "return [...document.querySelectorAll('[data-kind=prompt]')].map(p => p.textContent);",
        vec![],
    )
    .await;
    assert!(
        !prompts.to_string().contains("cancel me"),
        "the cancelled one never went: {prompts}"
    );
    assert_eq!(queued(c).await, json!([]));
    wait_page_state(c, "the task completed", "COMPLETED", 60).await;
    finish_clean(browser, stack).await;
}

// --------------------------------------------------------------- item 10

/// "Mark done" is on the page of a task in review with nothing to review
/// (no change on its branch; no repository), and completes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_in_review_with_nothing_to_review_is_marked_done() {
    let Some((browser, stack)) = setup(true).await else {
        return;
    };
    let c = &browser.client;
    let board = new_board(c, "Done").await;
    let repo = stack.git_repo("unchanged");
    let unchanged = new_task(
        c,
        &board,
        json!({"title": "Change nothing", "description": "scenario: echo nothing to change",
               "agent_type": "mock-agent-auto", "repository_url": repo, "max_retries": 0}),
    )
    .await;
    open_task(c, &unchanged).await;
    let why = wait_js(
        c,
        "Mark done offered in review",
        120,
        "const b = document.querySelector('[data-testid=btn-mark-done]');
         return document.querySelector('[data-testid=task-state]').dataset.state === 'REVIEW'
           && b && !b.hidden && b.title;",
        vec![],
    )
    .await;
    assert!(why.as_str().unwrap().contains("changed no file"), "{why}");
    fits_at_every_size(c, "mark-done").await;
    click(c, "[data-testid=btn-mark-done]").await;
    wait_js(
        c,
        "the task completed, the button gone",
        30,
        "return document.querySelector('[data-testid=task-state]').dataset.state === 'COMPLETED'
           && document.querySelector('[data-testid=btn-mark-done]').hidden;",
        vec![],
    )
    .await;

    // No repository: put in review by hand, marked done from its page.
    let bare = new_task(c, &board, json!({"title": "No repository"})).await;
    for state in ["IN_PROGRESS", "REVIEW"] {
        let moved = api(
            c,
            "PATCH",
            &format!("/tasks/{bare}/state"),
            json!({ "state": state }),
        )
        .await;
        assert_eq!(moved["status"], 200, "{moved}");
    }
    open_task(c, &bare).await;
    let why = wait_js(
        c,
        "Mark done offered without a repository",
        20,
        "const b = document.querySelector('[data-testid=btn-mark-done]');
         return b && !b.hidden && b.title;",
        vec![],
    )
    .await;
    assert!(why.as_str().unwrap().contains("no repository"), "{why}");
    click(c, "[data-testid=btn-mark-done]").await;
    wait_js(
        c,
        "the bare task completed",
        30,
        "return document.querySelector('[data-testid=task-state]').dataset.state === 'COMPLETED';",
        vec![],
    )
    .await;
    assert_eq!(task_state(c, &bare).await, "COMPLETED");
    finish_clean(browser, stack).await;
}
