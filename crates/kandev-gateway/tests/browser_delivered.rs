//! Issue 40, item 9: once a task is approved, its Changes tab still shows
//! the approved change, and says where it went ("Approved and pushed as
//! <commit> to <branch>"), though the clone was removed after the push;
//! nothing on the page fails (no 404, no console error). In headless
//! Chromium on the real stack (see `support`), at a desktop's (1440×900), a
//! small window's (800×900) and a phone's (390×844) size.
//!
//! Screenshots go to `<workspace>/target/screenshots/delivered-*.png`.

mod support;

use serde_json::{Value, json};
use support::*;

const SIZES: [(u32, u32); 3] = [(1440, 900), (800, 900), (390, 844)];

/// What the Changes tab shows: the delivery line, the clone line, the
/// files, README.md's added lines, and whether the review form shows.
const SHOWN: &str = "
    const delivered = document.querySelector('[data-testid=changes-delivered]');
    const diff = document.querySelector('[data-testid=changes-file-diff][data-path=\"README.md\"]');
    const summary = document.querySelector('[data-testid=changes-summary]').textContent;
    if (!delivered || !diff || summary.startsWith('Loading')) return false;
    return { delivered: delivered.textContent, summary,
             commit: delivered.querySelector('code').title,
             clone: document.querySelector('[data-testid=changes-path]').textContent,
             files: [...document.querySelectorAll('[data-testid=changes-file]')].map(f => f.dataset.path),
             added: [...diff.querySelectorAll('.diff-line[data-op=\"+\"]')].map(l => l.textContent)
               .some(t => t.includes('Edited by kandev-mock-agent (turn 1).')),
             review: !document.querySelector('[data-testid=review]').hidden,
             error: !!document.querySelector('.changes .error') };";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_approved_task_still_shows_its_approved_change() {
    let Some((browser, stack)) = start_ui(true).await else {
        return;
    };
    let c = &browser.client;
    let repo = stack.git_repo("delivered");
    let task_id = new_code_task(c, "Delivered", "Approve me", &repo).await;
    go(c, &format!("#/tasks/{task_id}")).await;
    wait_js(c, "the task in review", 120, IN_REVIEW, vec![]).await;
    click(c, "[data-testid=tab-changes]").await;
    wait_js(
        c,
        "README.md's diff and the review form",
        30,
        "const diff = document.querySelector('[data-testid=changes-file-diff][data-path=\"README.md\"]');
         return !!diff && !document.querySelector('[data-testid=review]').hidden
           && !document.querySelector('[data-testid=changes-delivered]');",
        vec![],
    )
    .await;

    type_into(c, "[data-testid=review-message]", "Improve the readme").await;
    click(c, "[data-testid=review-approve]").await;
    wait_js(
        c,
        "the task completed",
        60,
        "return document.querySelector('[data-testid=task-state]').dataset.state === 'COMPLETED';",
        vec![],
    )
    .await;
    let shown = wait_js(c, "the approved change", 30, SHOWN, vec![]).await;
    let short = &task_id.replace('-', "")[24..];
    let branch = format!("kandev/{short}-approve-me");
    let commit = shown["commit"].as_str().unwrap().to_string();
    assert_eq!(commit.len(), 40, "{shown}");
    let source = repo.trim_start_matches("file://");
    assert_eq!(
        shown,
        json!({"delivered": format!("Approved and pushed as {} to {branch} ({repo})", &commit[..12]),
               "summary": "1 file changed, +1 −0",
               "commit": commit, "clone": "Removed after the approval", "files": ["README.md"],
               "added": true, "review": false, "error": false}),
    );
    // The commit shown is the one on the remote's branch, and the clone
    // is gone.
    let pushed = std::process::Command::new("git")
        .args(["-C", source, "rev-parse", &branch])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&pushed.stdout).trim(), commit);
    let changes = api(c, "GET", &format!("/tasks/{task_id}/changes"), Value::Null).await;
    assert_eq!(changes["status"], 200, "{changes}");
    assert_eq!(changes["body"]["clone_removed"], true, "{changes}");
    assert_eq!(changes["body"]["workspace_path"], "", "{changes}");

    for (width, height) in SIZES {
        set_viewport(c, width, height).await;
        // Shown again from scratch at this size: the page reloads it.
        js(
            c,
            "document.querySelector('[data-testid=changes-where]').replaceChildren(); return true;",
            vec![],
        )
        .await;
        click(c, "[data-testid=changes-refresh]").await;
        let again = wait_js(c, "the approved change again", 30, SHOWN, vec![]).await;
        assert_eq!(again["commit"], commit.as_str(), "{width} px: {again}");
        let wide = js(c, OVERFLOW_X, vec![]).await;
        assert_eq!(wide, Value::Null, "{width} px: the page scrolls sideways");
        screenshot(c, &format!("delivered-{width}.png")).await;
    }
    finish_clean(browser, stack).await;
}

/// The agent-type admin form shows a type's state paths and keeps them
/// when the type is edited (a save sends the whole type).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_admin_form_keeps_an_agent_types_state_paths() {
    let Some((browser, stack)) = start_ui(false).await else {
        return;
    };
    let c = &browser.client;
    go(c, "#/admin/agent-types").await;
    let edit = "[data-testid=agent-type-row][data-id=mock-agent] [data-testid=agent-type-edit]";
    wait_js(
        c,
        "the mock agent listed",
        20,
        "return !!document.querySelector(arguments[0]);",
        vec![json!(edit)],
    )
    .await;
    click(c, edit).await;
    let shown = wait_js(
        c,
        "the form with the state paths",
        10,
        "return document.querySelector('[data-testid=at-state_paths]')?.value || false;",
        vec![],
    )
    .await;
    assert_eq!(shown, ".kandev-mock/");
    type_into(
        c,
        "[data-testid=at-state_paths]",
        ".kandev-mock/\nnotes/*.tmp",
    )
    .await;
    screenshot(c, "delivered-state-paths-form.png").await;
    click(c, "[data-testid=agent-type-dialog-submit]").await;
    wait_js(
        c,
        "the dialog closed",
        20,
        "return !document.querySelector('[data-testid=agent-type-dialog]');",
        vec![],
    )
    .await;
    let types = api(c, "GET", "/agent-types?include_disabled=true", Value::Null).await;
    let saved = types["body"]["agent_types"]
        .as_array()
        .and_then(|a| a.iter().find(|t| t["id"] == "mock-agent").cloned())
        .unwrap_or_else(|| panic!("mock-agent is listed: {types}"));
    assert_eq!(
        saved["state_paths"],
        json!([".kandev-mock/", "notes/*.tmp"]),
        "{saved}"
    );
    finish_clean(browser, stack).await;
}
