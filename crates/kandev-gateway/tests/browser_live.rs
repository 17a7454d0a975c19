//! Issue 41, the board page in headless Chromium on the real stack (see
//! `support`): cards pushed over the board's WebSocket with no polling
//! request in the network log (the page's Resource Timing entries), a
//! reconnect that misses nothing, search and filters, "Needs you" listing
//! a waiting permission, and a column of many cards that scrolls, each
//! card whole and reachable from the keyboard.

mod support;

use serde_json::json;
use support::*;

const END: &str = "\u{E010}";

/// Starts the page's network log afresh: its Resource Timing entries, and
/// each fetch's method (which Resource Timing does not keep).
const LOG_START: &str = "
    performance.setResourceTimingBufferSize(100000);
    performance.clearResourceTimings();
    if (!window.__fetchLog) {
      const orig = window.fetch;
      window.fetch = function (input, init) {
        window.__fetchLog.push({ url: String(input && input.url || input), method: (init && init.method) || 'GET' });
        return orig.apply(this, arguments);
      };
    }
    window.__fetchLog = [];
    return true;";

/// Requests of the page since [`LOG_START`] that read board `id`'s cards
/// or tasks (what a polling board sends): every request for its cards (a
/// GET-only route) in the Resource Timing log, and the GETs of its tasks.
const BOARD_READS: &str = "
    const id = arguments[0];
    const cards = performance.getEntriesByType('resource').map(e => e.name)
      .filter(u => u.includes('/api/v1/boards/' + id + '/cards'));
    const tasks = window.__fetchLog.filter(f => f.method === 'GET' && f.url.includes('/boards/' + id + '/tasks'))
      .map(f => f.url);
    return cards.concat(tasks);";

/// Changes the task's state from the page and resolves, once its card is in
/// the new column, with how long that took from the answer to the PATCH
/// and from the request, in ms.
const MOVE_AND_TIME: &str = "
    const [id, state, done] = arguments;
    const sel = '[data-testid=column][data-state=' + state + '] [data-testid=card][data-task-id=\"' + id + '\"]';
    let answered = null;
    const started = performance.now();
    const finish = () => done({ from_answer: performance.now() - answered, from_request: performance.now() - started });
    const obs = new MutationObserver(() => {
      if (answered !== null && document.querySelector(sel)) { obs.disconnect(); finish(); }
    });
    obs.observe(document.body, { childList: true, subtree: true });
    fetch('/api/v1/tasks/' + id + '/state', { method: 'PATCH',
      headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + sessionStorage.getItem('kandev.token') },
      body: JSON.stringify({ state }) })
      .then((r) => {
        answered = performance.now();
        if (!r.ok) { obs.disconnect(); done({ error: r.status }); }
        else if (document.querySelector(sel)) { obs.disconnect(); finish(); }
      });";

fn visible_cards_script() -> &'static str {
    "return [...document.querySelectorAll('[data-testid=column] [data-testid=card]')]
       .filter(k => !k.hidden && k.offsetParent !== null)
       .map(k => k.querySelector('[data-testid=card-link]').textContent).sort();"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_board_is_pushed_filtered_and_needs_you_lists_a_waiting_permission() {
    let Some((browser, stack)) = start_ui(false).await else {
        return;
    };
    let c = &browser.client;
    set_viewport(c, DESKTOP.0, DESKTOP.1).await;
    register_mock_type(
        c,
        "mock-agent-ask",
        "Mock agent (asks)",
        json!({"permission_policy": "ask"}),
    )
    .await;
    let board = new_board(c, "Live board").await;
    let card_id = new_task(c, &board, json!({"title": "Alpha card"})).await;
    go(c, &format!("#/boards/{board}")).await;
    wait_in_column(c, "the card, pushed", "TODO", &card_id, 20).await;
    wait_js(
        c,
        "the board live",
        20,
        "return document.querySelector('[data-testid=board-updated]').dataset.status === 'open';",
        vec![],
    )
    .await;
    // From here on the network log must hold no read of the board.
    js(c, LOG_START, vec![]).await;

    // A state change moves the card within 200 ms of its answer.
    let mut timings = Vec::new();
    for state in ["BLOCKED", "TODO", "BLOCKED", "TODO", "BLOCKED"] {
        let t = c
            .execute_async(MOVE_AND_TIME, vec![json!(card_id), json!(state)])
            .await
            .expect("the move runs");
        assert!(t["error"].is_null(), "{t}");
        timings.push(t);
    }
    eprintln!("card moves (ms): {timings:?}");
    let mut from_answer: Vec<f64> = timings
        .iter()
        .map(|t| t["from_answer"].as_f64().unwrap())
        .collect();
    from_answer.sort_by(f64::total_cmp);
    assert!(
        from_answer[from_answer.len() / 2] < 200.0,
        "the card moved {from_answer:?} ms after the change (median over 200 ms)"
    );

    // A new card arrives by itself; a task started with an agent that asks
    // goes to Waiting for input, pushed.
    let beta = new_task(c, &board, json!({"title": "Beta card"})).await;
    wait_in_column(c, "the new card", "TODO", &beta, 20).await;
    let asks = new_task(
        c,
        &board,
        json!({"title": "Gamma asks", "description": "scenario: permission",
               "agent_type": "mock-agent-ask"}),
    )
    .await;
    wait_in_column(
        c,
        "the asking card waiting for input",
        "WAITING_FOR_INPUT",
        &asks,
        120,
    )
    .await;
    let reads = js(c, BOARD_READS, vec![json!(board)]).await;
    assert_eq!(reads, json!([]), "no polling request in the network log");
    let connections = js(c, "return kandevDebug.boardSocket.connections;", vec![]).await;
    assert_eq!(connections, 1, "one connection for the open board");

    // A reconnect misses nothing: a change while the socket is away shows.
    js(c, "kandevDebug.boardSocket.drop(); return true;", vec![]).await;
    let moved = api(
        c,
        "PATCH",
        &format!("/tasks/{beta}/state"),
        json!({"state": "CANCELLED"}),
    )
    .await;
    assert_eq!(moved["status"], 200, "{moved}");
    wait_in_column(c, "the change made while away", "CANCELLED", &beta, 20).await;
    wait_js(
        c,
        "a second connection",
        20,
        "return kandevDebug.boardSocket.connections === 2;",
        vec![],
    )
    .await;

    // Search and filters narrow the board.
    let all = js(c, visible_cards_script(), vec![]).await;
    assert_eq!(all, json!(["Alpha card", "Beta card", "Gamma asks"]));
    type_into(c, "[data-testid=board-search]", "alpha").await;
    wait_js(c, "only Alpha", 10, "return document.querySelector('[data-testid=board-filter-shown]').textContent === '1 of 3 cards';", vec![]).await;
    assert_eq!(
        js(c, visible_cards_script(), vec![]).await,
        json!(["Alpha card"])
    );
    type_into(c, "[data-testid=board-search]", "").await;
    select_value(c, "[data-testid=board-filter-agent]", "mock-agent-ask").await;
    assert_eq!(
        js(c, visible_cards_script(), vec![]).await,
        json!(["Gamma asks"])
    );
    select_value(c, "[data-testid=board-filter-agent]", "").await;
    select_value(c, "[data-testid=board-filter-state]", "CANCELLED").await;
    assert_eq!(
        js(c, visible_cards_script(), vec![]).await,
        json!(["Beta card"])
    );
    let cancelled_count = js(c, "return document.querySelector('[data-testid=column][data-state=CANCELLED] [data-testid=column-count]').textContent;", vec![]).await;
    assert_eq!(cancelled_count, "1");
    select_value(c, "[data-testid=board-filter-creator]", ADMIN).await;
    assert_eq!(
        js(c, visible_cards_script(), vec![]).await,
        json!(["Beta card"])
    );
    click(c, "[data-testid=board-filter-clear]").await;
    assert_eq!(
        js(c, visible_cards_script(), vec![]).await,
        json!(["Alpha card", "Beta card", "Gamma asks"])
    );

    // Needs you lists the waiting permission, with its count in the title.
    wait_js(
        c,
        "the count in the top bar",
        20,
        "return document.querySelector('[data-testid=needs-count]').textContent === '1';",
        vec![],
    )
    .await;
    click(c, "[data-testid=nav-needs]").await;
    let listed = wait_js(
        c,
        "the waiting permission listed",
        20,
        "const i = document.querySelector('[data-testid=needs-group][data-state=WAITING_FOR_INPUT] [data-testid=needs-item]');
         return i && { id: i.dataset.taskId, title: document.title, items: document.querySelectorAll('[data-testid=needs-item]').length };",
        vec![],
    )
    .await;
    assert_eq!(listed["id"], json!(asks), "{listed}");
    assert_eq!(listed["items"], 1, "{listed}");
    assert!(
        listed["title"].as_str().unwrap().contains("Needs you (1)"),
        "{listed}"
    );
    screenshot(c, "live-board-needs.png").await;
    click(c, "[data-testid=needs-link]").await;
    wait_js(
        c,
        "the task page",
        20,
        "return location.hash.startsWith('#/tasks/');",
        vec![],
    )
    .await;
    finish_clean(browser, stack).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_column_of_many_cards_scrolls_and_every_card_is_reachable() {
    let Some((browser, stack)) = start_ui(false).await else {
        return;
    };
    let c = &browser.client;
    set_viewport(c, DESKTOP.0, DESKTOP.1).await;
    let board = new_board(c, "Many cards").await;
    let mut last = String::new();
    for i in 0..24 {
        last = new_task(c, &board, json!({"title": format!("Card {i:02}")})).await;
    }
    go(c, &format!("#/boards/{board}")).await;
    const LIST: &str = "[data-testid=column][data-state=TODO] [data-testid=card-list]";
    wait_js(
        c,
        "24 cards",
        30,
        &format!("return document.querySelectorAll('{LIST} [data-testid=card]').length === 24;"),
        vec![],
    )
    .await;
    let shape = js(
        c,
        &format!(
            "const l = document.querySelector('{LIST}');
             const cards = [...l.querySelectorAll('[data-testid=card]')];
             return {{ scrolls: l.scrollHeight > l.clientHeight + 1,
                       overflow: getComputedStyle(l).overflowY,
                       clipped: cards.filter(k => k.getBoundingClientRect().height + 1 < k.scrollHeight).length,
                       in_window: l.getBoundingClientRect().bottom <= innerHeight,
                       tabindex: l.tabIndex }};"
        ),
        vec![],
    )
    .await;
    assert_eq!(
        shape,
        json!({"scrolls": true, "overflow": "auto", "clipped": 0, "in_window": true, "tabindex": 0}),
        "the column scrolls and no card is cut"
    );

    // From the keyboard: the list takes the focus and End scrolls it to
    // its last card, whose buttons are then in view and on top.
    js(
        c,
        &format!("document.querySelector('{LIST}').focus(); return true;"),
        vec![],
    )
    .await;
    press(c, END).await;
    let reach = wait_js(
        c,
        "the last card's buttons in view",
        10,
        &format!(
            "const l = document.querySelector('{LIST}');
             const b = document.querySelector('[data-testid=card][data-task-id=\"' + arguments[0] + '\"] [data-testid=card-delete]');
             const r = b.getBoundingClientRect(), lr = l.getBoundingClientRect();
             const inside = r.top >= lr.top - 1 && r.bottom <= lr.bottom + 1 && r.bottom <= innerHeight;
             const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
             return inside && (hit === b || b.contains(hit)) && l.scrollTop > 0 && {{ top: l.scrollTop }};"
        ),
        vec![json!(last)],
    )
    .await;
    assert!(reach["top"].as_f64().unwrap() > 0.0, "{reach}");
    // Tab goes on into the cards of the scrolled column.
    press(c, TAB).await;
    let focused = js(
        c,
        &format!("return document.querySelector('{LIST}').contains(document.activeElement);"),
        vec![],
    )
    .await;
    assert_eq!(focused, true, "Tab from the list reaches its cards");
    screenshot(c, "live-board-many-cards.png").await;
    finish_clean(browser, stack).await;
}
