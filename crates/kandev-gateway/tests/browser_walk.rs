//! Issue 40: the UI walked as a person sees it, in headless Chromium at a
//! phone's (390×844), a small window's (800×900) and a desktop's
//! (1440×900) size, on the real stack (see `support`). Each test asserts
//! what the page shows and does (the DOM, the visible text, no sideways
//! scrolling, no console error) and waits on conditions, never on time.
//!
//! Screenshots go to `<workspace>/target/screenshots/walk-*.png`.

mod support;

use fantoccini::Client;
use serde_json::{Value, json};
use support::*;

/// True once the element `arguments[0]` is whole in the window and on top
/// there (nothing, a toast say, covers its middle).
const IN_VIEW: &str = "
    const e = document.querySelector(arguments[0]);
    if (!e) return false;
    const r = e.getBoundingClientRect();
    if (!r.width || r.top < 0 || r.left < 0 || r.bottom > innerHeight || r.right > innerWidth) return false;
    const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    return !!hit && (hit === e || e.contains(hit));";

/// Waits (up to `secs`) until the element `css` is whole in the window
/// and on top there.
async fn wait_in_view(c: &Client, what: &str, css: &str, secs: u64) {
    wait_js(c, what, secs, IN_VIEW, vec![json!(css)]).await;
}

/// The open permission request's Allow and Reject buttons.
const ALLOW: &str = "[data-kind=permission_request][data-state=open] [data-testid=permission-option][data-option-id=allow-once]";
const REJECT: &str = "[data-kind=permission_request][data-state=open] [data-testid=permission-option][data-option-id=reject-once]";

/// The stack and a logged-in browser with the pickable mock agent types.
async fn setup() -> Option<(Browser, Stack)> {
    let (browser, stack) = start_ui(false).await?;
    register_mock_types(&browser.client).await;
    Some((browser, stack))
}

// ---------------------------------------------------------------- item 1

/// A blank title keeps the New task dialog open with everything typed and
/// says why next to the title field; nothing is sent, no toast.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_blank_title_keeps_the_new_task_dialog_open() {
    let Some((browser, stack)) = setup().await else {
        return;
    };
    let c = &browser.client;
    open_new_board(c, "Dialog board").await;
    for (width, height) in [DESKTOP, PHONE] {
        set_viewport(c, width, height).await;
        click(c, "[data-testid=new-task]").await;
        type_into(c, "[data-testid=task-title]", "   ").await;
        type_into(c, "[data-testid=task-description]", "Keep this prompt").await;
        select_value(c, "[data-testid=task-agent-type]", "mock-agent-auto").await;
        type_into(c, "[data-testid=task-priority]", "3").await;
        for submit in ["task-dialog-submit", "task-dialog-create"] {
            click(c, &format!("[data-testid={submit}]")).await;
            let kept = wait_js(
                c,
                "the dialog open, the error by the title",
                10,
                KEPT,
                vec![],
            )
            .await;
            assert_eq!(
                kept,
                json!({"next": true, "text": "Give the task a title: it cannot be blank.",
                       "invalid": "true", "focused": true, "title": "   ",
                       "description": "Keep this prompt", "agent": "mock-agent-auto",
                       "priority": "3", "toasts": 0, "general": false}),
                "{width} px, {submit}"
            );
            assert_fits(c, &format!("the dialog at {width} px")).await;
        }
        screenshot(c, &format!("walk-blank-title-{width}.png")).await;
        create_once_titled(c, &format!("Titled at {width}")).await;
    }
    finish_clean(browser, stack).await;
}

/// The New task dialog, still open after a refusal: where the title's
/// error is and what the fields still hold.
const KEPT: &str = "
    const d = document.querySelector('[data-testid=task-dialog]');
    const title = document.querySelector('[data-testid=task-title]');
    const err = document.querySelector('[data-testid=title-error]');
    if (!d || !d.open || !err || err.hidden) return false;
    const t = title.getBoundingClientRect(), e = err.getBoundingClientRect();
    return { next: err.previousElementSibling === title && e.top >= t.bottom - 1 && e.top - t.bottom < 24,
             text: err.textContent, invalid: title.getAttribute('aria-invalid'),
             focused: document.activeElement === title, title: title.value,
             description: document.querySelector('[data-testid=task-description]').value,
             agent: document.querySelector('[data-testid=task-agent-type]').value,
             priority: document.querySelector('[data-testid=task-priority]').value,
             toasts: document.querySelectorAll('[data-testid=toast-error]').length,
             general: !document.querySelector('[data-testid=task-dialog-error]').hidden };";

/// Typing a title clears the error; the task is created as typed.
async fn create_once_titled(c: &Client, title: &str) {
    type_into(c, "[data-testid=task-title]", title).await;
    wait_js(
        c,
        "the error gone once the title is edited",
        10,
        "return !document.querySelector('[data-testid=title-error]')
           && !document.querySelector('[data-testid=task-title]').hasAttribute('aria-invalid');",
        vec![],
    )
    .await;
    click(c, "[data-testid=task-dialog-create]").await;
    let id = wait_js(
        c,
        "the dialog closed and the card shown",
        20,
        "const card = [...document.querySelectorAll('[data-testid=card]')]
           .find(k => k.querySelector('[data-testid=card-link]').textContent === arguments[0]);
         return !document.querySelector('[data-testid=task-dialog]') && card && card.dataset.taskId;",
        vec![json!(title)],
    )
    .await;
    let path = format!("/tasks/{}", id.as_str().unwrap());
    let task = api(c, "GET", &path, Value::Null).await;
    assert_eq!(task["body"]["description"], "Keep this prompt", "{task}");
    assert_eq!(task["body"]["priority"], 3, "{task}");
}

// ------------------------------------------------------------- items 2, 3

/// Cards say what their task waits for: an approval (not "Running"), or a
/// follow-up after a cancelled turn; a task waiting for permission brings
/// its Allow and Reject buttons into view when opened, and when the Feed
/// tab comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cards_say_what_the_agent_waits_for() {
    let Some((browser, stack)) = setup().await else {
        return;
    };
    let c = &browser.client;
    set_viewport(c, DESKTOP.0, DESKTOP.1).await;
    let board = open_new_board(c, "Waiting board").await;
    let (asks, cancels) = start_asker_and_waiter(c, "Ask before writing").await;
    wait_js(
        c,
        "the asking card says it needs an approval",
        90,
        "const k = document.querySelector(arguments[0]);
         const s = k && k.querySelector('[data-testid=card-status]');
         return !!document.querySelector('[data-testid=column][data-state=WAITING_FOR_INPUT] ' + arguments[0])
           && s && s.textContent === 'Needs your approval' && !/running/i.test(k.textContent);",
        vec![json!(card(&asks))],
    )
    .await;

    cancel_the_turn(c, &cancels).await;
    go(c, &format!("#/boards/{board}")).await;
    wait_js(
        c,
        "the cancelled card idle, waiting for a follow-up",
        30,
        "const s = document.querySelector(arguments[0] + ' [data-testid=card-status]');
         return !!document.querySelector('[data-testid=column][data-state=IN_PROGRESS] ' + arguments[0])
           && s && s.textContent === 'Idle — waiting for you' && s.offsetParent !== null;",
        vec![json!(card(&cancels))],
    )
    .await;
    assert_fits(c, "the board").await;
    screenshot(c, "walk-waiting-cards.png").await;

    // The question comes into view on opening its task, and back on Feed,
    // wherever the feed and the page were scrolled.
    for (width, height) in [DESKTOP, PHONE] {
        set_viewport(c, width, height).await;
        question_in_view(c, &board, &asks, width).await;
    }
    click(c, ALLOW).await;
    wait_page_state(c, "the task completed", "COMPLETED", 60).await;
    finish_clean(browser, stack).await;
}

/// The task asking for permission, opened from its board: its Allow and
/// Reject buttons in view; out of view again once later items came and the
/// page scrolled up; back in view when the Feed tab comes back.
async fn question_in_view(c: &Client, board: &str, asks: &str, width: u32) {
    go(c, &format!("#/boards/{board}")).await;
    click(c, &format!("{} [data-testid=card-link]", card(asks))).await;
    buttons_in_view(c, &format!("on opening the task at {width} px")).await;
    wait_js(
        c,
        "the task page saying it needs an approval",
        20,
        "return document.querySelector('[data-testid=exec-status]')?.textContent === 'Needs your approval';",
        vec![],
    )
    .await;
    scroll_the_question_away(c).await;
    click(c, "[data-testid=tab-changes]").await;
    wait_js(
        c,
        "the Changes tab",
        20,
        "return document.querySelector('[data-testid=changes-summary]')?.textContent.startsWith('No changes');",
        vec![],
    )
    .await;
    js(c, "window.scrollTo(0, 0); return true;", vec![]).await;
    click(c, "[data-testid=tab-feed]").await;
    buttons_in_view(c, &format!("back on Feed at {width} px")).await;
    assert_fits(c, &format!("the task at {width} px")).await;
    screenshot(c, &format!("walk-question-{width}.png")).await;
}

/// Opens the task, waits for its agent to wait, and cancels the turn.
async fn cancel_the_turn(c: &Client, task: &str) {
    go(c, &format!("#/tasks/{task}")).await;
    cancel_waiting_turn(c).await;
    wait_js(
        c,
        "the cancelled turn, said in words",
        60,
        "const end = document.querySelector('[data-kind=turn_end][data-stop-reason=cancelled]');
         return !!end && end.querySelector('[data-testid=stop-reason]').textContent === 'Cancelled by you'
           && document.querySelector('[data-testid=exec-status]')?.textContent === 'Idle — waiting for you';",
        vec![],
    )
    .await;
}

async fn buttons_in_view(c: &Client, when: &str) {
    for button in [ALLOW, REJECT] {
        wait_in_view(c, &format!("{button} in view {when}"), button, 30).await;
    }
}

/// Later items push the question out of the feed's view (the feed follows
/// its tail), and the page scrolls back to its top.
async fn scroll_the_question_away(c: &Client) {
    js(
        c,
        "const feed = window.kandevDebug.feed;
         for (let i = 1; i <= 60; i++) feed.pushNotice('note', 'later note ' + i);
         feed.flush(); window.scrollTo(0, 0); return true;",
        vec![],
    )
    .await;
    let shown = js(c, IN_VIEW, vec![json!(ALLOW)]).await;
    assert_eq!(shown, json!(false), "the question scrolled out of view");
}

// ---------------------------------------------------------------- item 4

/// The agent picker says what a type still needs, and stops saying it as
/// soon as the secret is saved on the Secrets page (and says it again once
/// the secret is deleted), without a reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_saved_secret_reaches_the_agent_picker() {
    let Some((browser, stack)) = setup().await else {
        return;
    };
    let c = &browser.client;
    register_mock_type(
        c,
        "mock-agent-keyed",
        "Keyed agent",
        json!({"required_env": ["KANDEV_WALK_KEY"]}),
    )
    .await;
    let board = open_new_board(c, "Picker board").await;
    js(c, "window.__kandevPageLoad = 'first'; return true;", vec![]).await;
    assert_eq!(
        picker_text(c).await,
        "Keyed agent — store KANDEV_WALK_KEY on the Secrets page"
    );

    click(c, "[data-testid=nav-secrets]").await;
    click(c, "[data-testid=secret-new]").await;
    type_into(c, "[data-testid=secret-name]", "KANDEV_WALK_KEY").await;
    type_into(c, "[data-testid=secret-value]", "a-walk-value").await;
    click(c, "[data-testid=secret-dialog-submit]").await;
    wait_for(
        c,
        "the secret listed",
        "[data-testid=secret-row][data-name=KANDEV_WALK_KEY]",
        20,
    )
    .await;
    click(c, "[data-testid=nav-home]").await;
    go(c, &format!("#/boards/{board}")).await;
    assert_eq!(picker_text(c).await, "Keyed agent");

    click(c, "[data-testid=nav-secrets]").await;
    click(c, "[data-testid=secret-delete]").await;
    click(c, "[data-testid=confirm-submit]").await;
    wait_for(c, "the list empty", "[data-testid=secrets-empty]", 20).await;
    go(c, &format!("#/boards/{board}")).await;
    assert_eq!(
        picker_text(c).await,
        "Keyed agent — store KANDEV_WALK_KEY on the Secrets page"
    );
    assert_eq!(
        js(c, "return window.__kandevPageLoad || null;", vec![]).await,
        json!("first"),
        "no page reload happened"
    );
    finish_clean(browser, stack).await;
}

/// The keyed type's line in a fresh New task dialog (closed again).
async fn picker_text(c: &Client) -> String {
    click(c, "[data-testid=new-task]").await;
    let text = wait_js(
        c,
        "the keyed type in the picker",
        20,
        "const o = document.querySelector('[data-testid=task-agent-type] option[value=mock-agent-keyed]');
         return o && o.textContent;",
        vec![],
    )
    .await;
    click(c, "[data-testid=task-dialog-cancel]").await;
    text.as_str().unwrap().to_string()
}

// ---------------------------------------------------------------- item 5

/// Every page fits a phone, a small window and a desktop: no sideways
/// scrolling, the header's buttons whole, tables readable, the task page
/// exactly the window's height on a desktop, a readable breadcrumb, and
/// toasts clear of the follow-up box.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pages_fit_a_phone_a_small_window_and_a_desktop() {
    let Some((browser, stack)) = setup().await else {
        return;
    };
    let c = &browser.client;
    // The longest header: "Notifications blocked".
    js(
        c,
        "window.Notification = class { static requestPermission() { return Promise.resolve('denied'); } };
         window.Notification.permission = 'denied'; window.kandevNotifier.refresh(); return true;",
        vec![],
    )
    .await;
    let board = open_new_board(c, "A board with a rather long name for the breadcrumb").await;
    let title = "Please append a paragraph to the project README file, and explain the change";
    let task = start_task(c, title, "scenario: code", "mock-agent-auto").await;
    wait_in_column(c, "the task completed", "COMPLETED", &task, 90).await;
    for (width, height) in [PHONE, SMALL, DESKTOP] {
        set_viewport(c, width, height).await;
        walk_the_pages(c, &board, width).await;
        walk_the_task(c, &task, width, height).await;
    }
    finish_clean(browser, stack).await;
}

/// The boards list, the board, the Secrets and Agent types pages and the
/// New task dialog at the window's current width.
async fn walk_the_pages(c: &Client, board: &str, width: u32) {
    let pages = [
        ("boards", "#/boards".to_string(), "[data-testid=board-link]"),
        ("board", format!("#/boards/{board}"), "[data-testid=card]"),
        (
            "secrets",
            "#/settings/secrets".into(),
            "[data-testid=secrets-empty]",
        ),
        (
            "agent-types",
            "#/admin/agent-types".into(),
            "[data-testid=agent-type-row]",
        ),
    ];
    for (name, hash, ready) in pages {
        go(c, &hash).await;
        let script = format!("return !!document.querySelector('{ready}');");
        wait_js(c, &format!("the {name} page"), 20, &script, vec![]).await;
        assert_fits(c, &format!("{name} at {width} px")).await;
        // The header's last button is whole and on top.
        // (A toast may cover it for the few seconds it shows.)
        wait_in_view(
            c,
            &format!("Log out in view on {name} at {width} px"),
            "[data-testid=logout]",
            15,
        )
        .await;
        screenshot(c, &format!("walk-{name}-{width}.png")).await;
    }
    if width == PHONE.0 {
        // Table rows stack: no cell squeezed into a narrow column.
        let narrow = js(
            c,
            "return [...document.querySelectorAll('[data-testid=agent-type-row] td')]
               .filter(td => td.textContent.trim() && td.getBoundingClientRect().width < 200).length;",
            vec![],
        )
        .await;
        assert_eq!(narrow, json!(0), "agent type cells at {width} px");
    }
    go(c, &format!("#/boards/{board}")).await;
    click(c, "[data-testid=new-task]").await;
    wait_js(
        c,
        "the dialog",
        10,
        "return !!document.querySelector('[data-testid=task-dialog]')?.open;",
        vec![],
    )
    .await;
    assert_fits(c, &format!("the New task dialog at {width} px")).await;
    click(c, "[data-testid=task-dialog-cancel]").await;
}

/// The task page: its feed, its history, its breadcrumb, its height on a
/// desktop and the toasts after a follow-up on a phone.
async fn walk_the_task(c: &Client, task: &str, width: u32, height: u32) {
    go(c, &format!("#/tasks/{task}")).await;
    wait_for(c, "the task's feed", "[data-kind=turn_end]", 30).await;
    assert_fits(c, &format!("the task at {width} px")).await;
    wait_in_view(
        c,
        &format!("Log out in view on the task at {width} px"),
        "[data-testid=logout]",
        15,
    )
    .await;
    // The page's own name in the breadcrumb: readable, cut with an
    // ellipsis after a sensible width.
    let crumb = js(
        c,
        "const e = document.querySelector('.crumbs [aria-current]');
         const r = e.getBoundingClientRect();
         return { width: r.width, right: r.right, cut: e.scrollWidth > e.clientWidth,
                  ellipsis: getComputedStyle(e).textOverflow, inside: r.right <= innerWidth && r.left >= 0 };",
        vec![],
    )
    .await;
    assert!(
        crumb["width"].as_f64().unwrap() >= 120.0,
        "a readable title at {width} px: {crumb}"
    );
    assert!(
        crumb["width"].as_f64().unwrap() <= 460.0,
        "cut after a sensible width at {width} px: {crumb}"
    );
    assert_eq!(
        (&crumb["ellipsis"], &crumb["inside"]),
        (&json!("ellipsis"), &json!(true)),
        "{crumb}"
    );
    if (width, height) == DESKTOP {
        let heights = js(c, "return [document.scrollingElement.scrollHeight, innerHeight, document.querySelector('[data-testid=feed]').clientHeight];", vec![]).await;
        assert!(
            heights[0].as_u64() <= heights[1].as_u64(),
            "one scrollbar at 1440×900: {heights}"
        );
        assert!(
            heights[2].as_u64().unwrap() >= 300,
            "a tall feed: {heights}"
        );
    }
    screenshot(c, &format!("walk-task-{width}.png")).await;
    if width == PHONE.0 {
        toasts_clear_the_follow_up_box(c).await;
    }
    history_fits(c, width).await;
}

async fn toasts_clear_the_follow_up_box(c: &Client) {
    type_into(c, "[data-testid=prompt-input]", "scenario: echo hello").await;
    click(c, "[data-testid=prompt-send]").await;
    for block in ["end", "center"] {
        let covered = wait_js(
            c,
            "a toast, clear of the follow-up box",
            20,
            "const form = document.querySelector('[data-testid=prompt-form]');
             form.scrollIntoView({ block: arguments[0] });
             const toasts = [...document.querySelectorAll('.toast')].filter(t => t.offsetParent !== null);
             if (!toasts.length) return false;
             const f = form.getBoundingClientRect();
             const over = toasts.filter(t => { const r = t.getBoundingClientRect();
               return r.left < f.right && r.right > f.left && r.top < f.bottom && r.bottom > f.top; });
             return { over: over.map(t => t.textContent) };",
            vec![json!(block)],
        )
        .await;
        assert_eq!(
            covered,
            json!({"over": []}),
            "toasts over the follow-up box ({block})"
        );
    }
    screenshot(c, "walk-toasts-390.png").await;
}

async fn history_fits(c: &Client, width: u32) {
    click(c, "[data-testid=tab-history]").await;
    wait_js(
        c,
        "the history",
        20,
        "return document.querySelectorAll('[data-testid=task-event-row]').length > 0;",
        vec![],
    )
    .await;
    assert_fits(c, &format!("the history at {width} px")).await;
    let squeezed = js(
        c,
        "const box = document.querySelector('[data-testid=history]');
         return [...box.querySelectorAll('table')].filter(t => t.scrollWidth > box.clientWidth + 1).length;",
        vec![],
    )
    .await;
    assert_eq!(squeezed, json!(0), "the history's tables fit at {width} px");
    screenshot(c, &format!("walk-history-{width}.png")).await;
    click(c, "[data-testid=tab-feed]").await;
}

// ---------------------------------------------------------------- item 7

/// The feed, the header and the history say what happened in plain words:
/// how each turn ended, that the agent stopped, that it was thinking; no
/// stop-reason names, character or field counts, or connection counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_task_page_speaks_plain_words() {
    let Some((browser, stack)) = setup().await else {
        return;
    };
    let c = &browser.client;
    open_new_board(c, "Words board").await;
    let task = start_task(c, "Say it plainly", "scenario: code", "mock-agent-auto").await;
    click(c, &format!("{} [data-testid=card-link]", card(&task))).await;
    wait_js(c, "the first turn's end", 90, &turn_ends(1), vec![]).await;
    for (n, prompt) in [
        (2, "scenario: stop max_tokens"),
        (3, "scenario: stop refusal"),
    ] {
        follow_up(c, prompt).await;
        wait_js(c, &format!("turn {n}'s end"), 90, &turn_ends(n), vec![]).await;
    }
    follow_up(c, "scenario: wait-cancel").await;
    cancel_the_turn_here(c).await;
    feed_in_words(c).await;
    history_in_words(c).await;
    finish_clean(browser, stack).await;
}

/// How the turns ended, the thoughts, the agent's exits and the connection.
async fn feed_in_words(c: &Client) {
    let ends = js(
        c,
        "return [...document.querySelectorAll('[data-kind=turn_end]')].map(e =>
           [e.dataset.stopReason, e.querySelector('[data-testid=stop-reason]').textContent]);",
        vec![],
    )
    .await;
    assert_eq!(
        ends,
        json!([
            ["end_turn", "Finished"],
            ["max_tokens", "Stopped: the reply was too long"],
            ["refusal", "The agent refused"],
            ["cancelled", "Cancelled by you"]
        ]),
    );
    let words = js(
        c,
        "const text = (sel) => [...document.querySelectorAll(sel)].map(e => e.querySelector('p, summary').textContent);
         return { thoughts: [...new Set(text('[data-kind=thought]'))], exits: [...new Set(text('[data-kind=lifecycle]'))],
                  socket: document.querySelector('[data-testid=socket-status]').textContent };",
        vec![],
    )
    .await;
    assert_eq!(
        words,
        json!({"thoughts": ["Thinking"], "exits": ["The agent stopped running."], "socket": "Live"})
    );
    assert_no_jargon(c, "the feed").await;
    screenshot(c, "walk-words-feed.png").await;
}

/// The History tab: what happened to the task, and how the last turn of
/// its agent instance (one, kept across the follow-ups) ended.
async fn history_in_words(c: &Client) {
    click(c, "[data-testid=tab-history]").await;
    let history = wait_js(
        c,
        "the history",
        20,
        "const rows = (sel, i) => [...document.querySelectorAll(sel)].map(r => r.cells[i].textContent);
         return document.querySelectorAll('[data-testid=task-event-row]').length > 0
           && { what: [...new Set(rows('[data-testid=task-event-row]', 1))].sort(),
                ended: rows('[data-testid=attempt-row]', 5) };",
        vec![],
    )
    .await;
    assert_eq!(history["ended"], json!(["Cancelled by you"]), "{history}");
    let what = history["what"].as_array().unwrap();
    assert!(
        what.iter()
            .all(|w| ["Created", "Edited", "Moved"].contains(&w.as_str().unwrap()))
            && what.contains(&json!("Created"))
            && what.contains(&json!("Moved")),
        "{history}"
    );
    assert_no_jargon(c, "the history").await;
    screenshot(c, "walk-words-history.png").await;
}

/// Sends a follow-up once the agent can take one.
async fn follow_up(c: &Client, prompt: &str) {
    wait_enabled(c, "the follow-up box", "[data-testid=btn-start]", 60).await;
    type_into(c, "[data-testid=prompt-input]", prompt).await;
    click(c, "[data-testid=prompt-send]").await;
}

async fn cancel_the_turn_here(c: &Client) {
    cancel_waiting_turn(c).await;
    wait_js(c, "the cancelled turn", 60, &turn_ends(4), vec![]).await;
}

/// Words of the machinery that the main view never shows in its own text
/// (what people and the agent wrote aside: prompts, messages, tool output,
/// the task's description).
async fn assert_no_jargon(c: &Client, page: &str) {
    let found = js(
        c,
        "const main = document.querySelector('main').cloneNode(true);
         main.querySelectorAll('[data-kind=prompt], [data-kind=message], .thought-body, .desc, .tool-output, .tool-raw')
           .forEach(e => e.remove());
         const text = main.textContent;
         return [/end_turn|max_tokens|max_turn_requests|stop_reason/, /reconnects?:/i, /closed its output/i,
                 /Agent exited/, /\\(\\d+ chars?\\)/, /\\b\\d+ fields\\b/, /state_changed/, /history chunks/]
           .filter(re => re.test(text)).map(String);",
        vec![],
    )
    .await;
    assert_eq!(found, json!([]), "jargon on {page}");
}

// ------------------------------------------------------------- issue 38

/// The New task dialog's agent picker: each option's value, text and
/// readiness, the selected value and the hint under it.
const PICKER: &str = "
    const s = document.querySelector('[data-testid=task-agent-type]');
    const hint = document.querySelector('[data-testid=task-agent-hint]');
    return s && s.options.length > 1 && { value: s.value, hint: hint.hidden ? '' : hint.textContent,
             options: [...s.options].map(o => ({ id: o.value, text: o.textContent, ready: o.dataset.ready || null })) };";

/// On a fresh install the picker lists the demo first and picks it; a type
/// whose secret is missing is never the default and says what to do, as
/// does one whose image is still to be built (the image fields of
/// `GET /agent-types`, checked on the picker's own functions).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_new_task_picker_starts_with_the_demo() {
    let Some((browser, stack)) = start_ui(false).await else {
        return;
    };
    let c = &browser.client;
    set_viewport(c, DESKTOP.0, DESKTOP.1).await;
    open_new_board(c, "Picker board").await;
    click(c, "[data-testid=new-task]").await;
    let picker = wait_js(c, "the agent picker", 20, PICKER, vec![]).await;
    let options = picker["options"].as_array().unwrap();
    assert_eq!(options[0]["id"], "", "none first: {picker}");
    assert_eq!(options[1]["id"], "mock-agent", "then the demo: {picker}");
    assert_eq!(options[1]["text"], "Mock agent (demo)", "{picker}");
    assert_eq!(picker["value"], "mock-agent", "the default: {picker}");
    assert!(
        picker["hint"].as_str().unwrap().starts_with("The demo:"),
        "{picker}"
    );
    for o in options.iter().filter(|o| o["ready"] == "false") {
        assert_ne!(picker["value"], o["id"], "never the default: {picker}");
    }
    if std::env::var_os("ANTHROPIC_API_KEY").is_none() {
        let claude = options
            .iter()
            .find(|o| o["id"] == "claude-code")
            .unwrap_or_else(|| panic!("claude-code listed: {picker}"));
        assert_eq!(claude["ready"], "false", "{claude}");
        assert!(
            claude["text"]
                .as_str()
                .unwrap()
                .starts_with("Claude Code — store ANTHROPIC_API_KEY on the Secrets page"),
            "{claude}"
        );
        select_value(c, "[data-testid=task-agent-type]", "claude-code").await;
        let picked = wait_js(c, "claude-code picked", 10, PICKER, vec![]).await;
        assert!(
            picked["hint"]
                .as_str()
                .unwrap()
                .starts_with("To run it: store ANTHROPIC_API_KEY on the Secrets page"),
            "{picked}"
        );
    }
    assert_fits(c, "the New task dialog").await;
    screenshot(c, "walk-agent-picker.png").await;
    click(c, "[data-testid=task-dialog-cancel]").await;

    // What each image status says, and that an image still to be built or
    // a missing secret keeps a type from being the default, the last one
    // used included.
    let hints = js(
        c,
        "return import('/js/common.js').then((m) => [
           m.agentTypeHints({ missing_env: [], image_status: 'missing', image_build_seconds: 42 }),
           m.agentTypeHints({ missing_env: ['ANTHROPIC_API_KEY', 'GITHUB_TOKEN'], image_status: 'missing', image_build_seconds: null }),
           m.agentTypeHints({ missing_env: [], image_status: 'building', image_build_seconds: 300 }),
           m.agentTypeHints({ missing_env: [], image_status: 'failed', image_error: 'step 3/9\\nnpm error 404 @acme/agent' }),
           m.agentTypeHints({ missing_env: [], image_status: 'present', image_build_seconds: 42 }),
           m.agentTypeHints({ missing_env: [] }),
           m.agentTypeHints({ missing_env: [], image: 'ghcr.io/acme/agent:1', image_status: 'missing' }),
           [m.agentTypeReady({ missing_env: [], image_status: '' }), m.agentTypeReady({ missing_env: [], image_status: 'building' })],
           (() => {
             localStorage.setItem('kandev.lastAgentType', 'claude-code');
             const picked = m.defaultAgentType([
               { id: 'claude-code', enabled: true, missing_env: ['ANTHROPIC_API_KEY'] },
               { id: 'mock-agent', enabled: true, missing_env: [], image_status: 'missing' },
               { id: 'gemini', enabled: true, missing_env: [], image_status: 'failed' },
               { id: 'codex', enabled: true, missing_env: [], image_status: 'present' },
             ]);
             localStorage.removeItem('kandev.lastAgentType');
             return picked;
           })(),
           m.defaultAgentType([{ id: 'claude-code', enabled: true, missing_env: ['ANTHROPIC_API_KEY'] }]),
         ]);",
        vec![],
    )
    .await;
    assert_eq!(
        hints,
        json!([
            ["the image is built on first use (about 42 s)"],
            [
                "store ANTHROPIC_API_KEY and GITHUB_TOKEN on the Secrets page",
                "the image is built on first use"
            ],
            ["its image is being built (about 5 min)"],
            ["its image failed to build (npm error 404 @acme/agent); the next task tries again"],
            [],
            [],
            ["the image is pulled on first use"],
            [true, false],
            "codex",
            ""
        ])
    );
    finish_clean(browser, stack).await;
}
