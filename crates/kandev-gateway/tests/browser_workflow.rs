//! Issue 41, a board's own workflow in headless Chromium on the real stack
//! (see `support`): the board draws its columns (Backlog → Plan (WIP 1) →
//! Implement → Review), a card moved into Plan from the page runs there and
//! each finished run moves it on by itself, and the second card waits in
//! Plan's queue, shown as queued, until the first leaves. Also the
//! new-task dialog's agent profile picker (issue 42).

mod support;

use fantoccini::Client;
use serde_json::{Value, json};
use support::*;

/// The names of the columns the board draws, left to right.
const COLUMN_NAMES: &str = "
    return [...document.querySelectorAll('[data-testid=column]')]
      .map(c => c.querySelector('.column-title').firstChild.textContent.trim());";

/// Whether the card `arguments[1]` is in the column `arguments[0]`.
const IN_COLUMN_ID: &str = "
    const [col, id] = arguments;
    return !!document.querySelector('[data-testid=column][data-column-id=\"' + col + '\"] [data-testid=card][data-task-id=\"' + id + '\"]');";

/// Records, for every card, each column it is drawn in, in order.
const TRACK_COLUMNS: &str = "
    window.__cardColumns = {};
    const note = () => {
      for (const k of document.querySelectorAll('[data-testid=column] [data-testid=card]')) {
        const col = k.closest('[data-testid=column]').dataset.columnId;
        const seen = (window.__cardColumns[k.dataset.taskId] ||= []);
        if (seen[seen.length - 1] !== col) seen.push(col);
      }
    };
    note();
    new MutationObserver(note).observe(document.body, { childList: true, subtree: true });
    return true;";

fn workflow(ids: &[String]) -> Value {
    json!([
        {"id": ids[0], "name": "Backlog", "state": "TODO"},
        {"id": ids[1], "name": "Plan", "state": "IN_PROGRESS", "wip_limit": 1, "colour": "#3366cc",
         "agent_type": "mock-agent", "prompt_template": "{description}", "on_success": ids[2]},
        {"id": ids[2], "name": "Implement", "state": "IN_PROGRESS", "agent_type": "mock-agent",
         "prompt_template": "{description}\n\nthe plan: {summary}", "on_success": ids[3]},
        {"id": ids[3], "name": "Review", "state": "REVIEW"},
    ])
}

/// A task of `board` with `title` and `description`, not retried.
fn task(title: &str, description: &str) -> Value {
    json!({"title": title, "description": description, "max_retries": 0})
}

/// Moves a card into a column with its "Move" dialog.
async fn move_with_dialog(c: &Client, task: &str, column: &str) {
    click(c, &format!("{} [data-testid=card-move]", card(task))).await;
    select_value(
        c,
        "[data-testid=move-column] select[name=column_id]",
        column,
    )
    .await;
    click(c, "[data-testid=move-column-submit]").await;
    wait_js(
        c,
        "the move dialog closed",
        20,
        "return !document.querySelector('dialog[data-testid=move-column][open]');",
        vec![],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_three_step_workflow_is_drawn_runs_cards_on_by_itself_and_queues_at_its_limit() {
    let Some((browser, stack)) = start_ui(false).await else {
        return;
    };
    let c = &browser.client;
    set_viewport(c, DESKTOP.0, DESKTOP.1).await;
    let board = new_board(c, "Flow board").await;
    let ids: Vec<String> = (0..4).map(|_| uuid::Uuid::now_v7().to_string()).collect();
    let put = api(
        c,
        "PUT",
        &format!("/boards/{board}/columns"),
        json!({"columns": workflow(&ids)}),
    )
    .await;
    assert_eq!(put["status"], 200, "{put}");
    let first = new_task(c, &board, task("First card", "scenario: slow 20 100")).await;
    let second = new_task(c, &board, task("Second card", "scenario: echo second")).await;

    go(c, &format!("#/boards/{board}")).await;
    wait_js(
        c,
        "the board's own columns",
        20,
        &format!("const names = (() => {{ {COLUMN_NAMES} }})(); return names.join('|') === 'Backlog|Plan|Implement|Review';"),
        vec![],
    )
    .await;
    for id in [&first, &second] {
        wait_js(
            c,
            "a new card in Backlog",
            20,
            IN_COLUMN_ID,
            vec![json!(ids[0]), json!(id)],
        )
        .await;
    }
    let plan_title = js(
        c,
        "const col = document.querySelector('[data-testid=column][data-column-id=\"' + arguments[0] + '\"]');
         return { auto: col.querySelector('[data-testid=column-auto]')?.textContent, count: col.querySelector('[data-testid=column-count]').textContent,
                  border: getComputedStyle(col).borderTopColor };",
        vec![json!(ids[1])],
    )
    .await;
    assert_eq!(plan_title["auto"], "▶ mock-agent", "{plan_title}");
    assert_eq!(plan_title["count"], "0 / 1", "{plan_title}");
    assert_eq!(plan_title["border"], "rgb(51, 102, 204)", "{plan_title}");
    js(c, TRACK_COLUMNS, vec![]).await;

    // Both into Plan from the page: the first runs, the second waits.
    move_with_dialog(c, &first, &ids[1]).await;
    wait_js(
        c,
        "the first card in Plan",
        20,
        IN_COLUMN_ID,
        vec![json!(ids[1]), json!(first)],
    )
    .await;
    move_with_dialog(c, &second, &ids[1]).await;
    let queued = wait_js(
        c,
        "the second card queued in Plan",
        20,
        "const [col, id] = arguments;
         const k = document.querySelector('[data-testid=column][data-column-id=\"' + col + '\"] ' + '[data-testid=card][data-task-id=\"' + id + '\"]');
         if (!k || !k.querySelector('[data-testid=card-queued]')) return null;
         const c = k.closest('[data-testid=column]');
         return { queue: c.querySelector('[data-testid=column-queue]').textContent, count: c.querySelector('[data-testid=column-count]').textContent };",
        vec![json!(ids[1]), json!(second)],
    )
    .await;
    assert_eq!(queued["queue"], "1 queued", "{queued}");
    assert_eq!(queued["count"], "1 / 1", "{queued}");
    screenshot(c, "workflow-queued.png").await;

    // Each finished run moves a card on by itself; both end in Review.
    for id in [&first, &second] {
        wait_js(
            c,
            "a card in Review",
            240,
            IN_COLUMN_ID,
            vec![json!(ids[3]), json!(id)],
        )
        .await;
    }
    let path = js(c, "return window.__cardColumns;", vec![]).await;
    for id in [&first, &second] {
        let seen: Vec<String> = serde_json::from_value(path[id.as_str()].clone()).unwrap();
        assert_eq!(
            seen,
            ids.to_vec(),
            "card {id} went Backlog → Plan → Implement → Review on the page"
        );
    }
    let queued_left = js(
        c,
        "return document.querySelectorAll('[data-testid=card-queued]').length;",
        vec![],
    )
    .await;
    assert_eq!(queued_left, 0);
    screenshot(c, "workflow-done.png").await;
    finish_clean(browser, stack).await;
}

/// Issue 42: the new-task dialog offers the chosen agent type's profiles
/// (none: the field is hidden), and the one picked goes with the task.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_new_task_dialog_picks_an_agent_profile_of_the_chosen_type() {
    let Some((browser, stack)) = start_ui(false).await else {
        return;
    };
    let c = &browser.client;
    set_viewport(c, DESKTOP.0, DESKTOP.1).await;
    register_mock_type(c, "mock-plain", "Mock agent (plain)", json!({})).await;
    register_mock_type(c, "mock-profiled", "Mock agent (profiled)", json!({})).await;
    let made = api(
        c,
        "POST",
        "/agent-profiles",
        json!({"agent_type": "mock-profiled", "name": "Careful", "mode": "plan",
               "instructions": "Think first."}),
    )
    .await;
    assert_eq!(made["status"], 201, "{made}");
    let profile = made["body"]["id"].as_str().unwrap().to_string();
    let board = new_board(c, "Profiles").await;
    go(c, &format!("#/boards/{board}")).await;
    wait_for(c, "the board", "[data-testid=new-task]", 20).await;

    click(c, "[data-testid=new-task]").await;
    type_into(c, "[data-testid=task-title]", "With a profile").await;
    select_value(c, "[data-testid=task-agent-type]", "mock-plain").await;
    let hidden = wait_js(
        c,
        "no profiles for the plain type",
        20,
        "const f = document.querySelector('[data-testid=task-profile]').closest('.field');
         return f.hidden ? document.querySelector('[data-testid=task-profile]').options.length : null;",
        vec![],
    )
    .await;
    assert_eq!(hidden, 1, "only the type's defaults");
    select_value(c, "[data-testid=task-agent-type]", "mock-profiled").await;
    let offered = wait_js(
        c,
        "the profiled type's profile offered",
        20,
        "const s = document.querySelector('[data-testid=task-profile]');
         return s.closest('.field').hidden ? null : [...s.options].map(o => [o.value, o.textContent]);",
        vec![],
    )
    .await;
    assert_eq!(
        offered,
        json!([["", "— the type’s defaults —"], [profile, "Careful"]]),
        "{offered}"
    );
    select_value(c, "[data-testid=task-profile]", &profile).await;
    click(c, "[data-testid=task-dialog-create]").await;
    let id = wait_js(
        c,
        "the card",
        20,
        "const k = [...document.querySelectorAll('[data-testid=card]')]
           .find(k => k.querySelector('[data-testid=card-link]').textContent === 'With a profile');
         return k ? k.dataset.taskId : null;",
        vec![],
    )
    .await;
    let task = api(
        c,
        "GET",
        &format!("/tasks/{}", id.as_str().unwrap()),
        Value::Null,
    )
    .await;
    assert_eq!(
        task["body"]["metadata"]["agent_profile_id"], profile,
        "{task}"
    );
    finish_clean(browser, stack).await;
}

/// Issue 41: "Blocked by…" on a card chooses the tasks it waits for; the
/// card says why it is held, and stops saying so, pushed, once both of its
/// blockers complete. A cycle is refused in the dialog with the server's
/// reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_card_blocked_by_two_says_why_until_both_complete() {
    let Some((browser, stack)) = start_ui(false).await else {
        return;
    };
    let c = &browser.client;
    set_viewport(c, DESKTOP.0, DESKTOP.1).await;
    let board = new_board(c, "Blockers").await;
    let build = new_task(c, &board, task("Build", "")).await;
    let lint = new_task(c, &board, task("Lint", "")).await;
    // Ship has an agent; it is to start by itself once both are done.
    register_mock_type(c, "mock-ship", "Mock agent (ship)", json!({})).await;
    let ship = new_task(
        c,
        &board,
        json!({"title": "Ship", "description": "scenario: echo shipped", "agent_type": "mock-ship",
               "max_retries": 0, "autostart": false}),
    )
    .await;
    go(c, &format!("#/boards/{board}")).await;
    for id in [&build, &lint, &ship] {
        wait_js(
            c,
            "the cards",
            20,
            &format!("return !!document.querySelector('{}');", card(id)),
            vec![],
        )
        .await;
    }

    // Ship waits for Build and Lint, chosen in its dialog.
    click(c, &format!("{} [data-testid=card-blockers]", card(&ship))).await;
    for id in [&build, &lint] {
        click(
            c,
            &format!("[data-testid=blocker-option][data-task-id=\"{id}\"] input"),
        )
        .await;
    }
    click(c, "[data-testid=blockers-submit]").await;
    let why = wait_js(
        c,
        "Ship says it is blocked",
        20,
        &format!("const b = document.querySelector('{} [data-testid=card-blocked]'); return b ? b.textContent : null;", card(&ship)),
        vec![],
    )
    .await;
    let why = why.as_str().unwrap();
    assert!(why.contains("'Build'") && why.contains("'Lint'"), "{why}");

    // Build waiting for Ship would be a cycle: the dialog says so.
    click(c, &format!("{} [data-testid=card-blockers]", card(&build))).await;
    click(
        c,
        &format!("[data-testid=blocker-option][data-task-id=\"{ship}\"] input"),
    )
    .await;
    click(c, "[data-testid=blockers-submit]").await;
    let refused = wait_js(
        c,
        "the cycle refused",
        20,
        "const e = document.querySelector('[data-testid=blockers-error]'); return e && !e.hidden ? e.textContent : null;",
        vec![],
    )
    .await;
    assert!(refused.as_str().unwrap().contains("cycle"), "{refused}");
    click(c, "[data-testid=blockers-cancel]").await;
    // Held, it may start by itself now: not before its blockers complete.
    let auto = api(
        c,
        "PATCH",
        &format!("/tasks/{ship}"),
        json!({"autostart": true}),
    )
    .await;
    assert_eq!(auto["status"], 200, "{auto}");

    // Both blockers complete: Ship is free, pushed to the page.
    for id in [&build, &lint] {
        for state in ["IN_PROGRESS", "COMPLETED"] {
            let moved = api(
                c,
                "PATCH",
                &format!("/tasks/{id}/state"),
                json!({"state": state}),
            )
            .await;
            assert_eq!(moved["status"], 200, "{moved}");
        }
        if *id == build {
            let still = js(
                c,
                &format!(
                    "return !!document.querySelector('{} [data-testid=card-blocked]');",
                    card(&ship)
                ),
                vec![],
            )
            .await;
            assert_eq!(still, true, "still waiting for Lint");
            let held = api(c, "GET", &format!("/tasks/{ship}"), Value::Null).await;
            assert_eq!(held["body"]["state"], "TODO", "not started: {held}");
        }
    }
    wait_js(
        c,
        "Ship no longer blocked",
        20,
        &format!(
            "return !document.querySelector('{} [data-testid=card-blocked]');",
            card(&ship)
        ),
        vec![],
    )
    .await;
    // Freed, Ship's agent ran by itself: its card reached the end.
    wait_js(
        c,
        "Ship started and finished by itself",
        120,
        &format!(
            "return !!document.querySelector('[data-testid=column][data-state=COMPLETED] {}');",
            card(&ship)
        ),
        vec![],
    )
    .await;
    // The refused cycle's 400 is the only error Chromium logs.
    let errors: Vec<String> = browser
        .console_errors()
        .await
        .into_iter()
        .filter(|e| {
            !(e.contains(&format!("/tasks/{build}/blockers")) && e.contains("status of 400"))
        })
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    finish(browser, stack).await;
}
