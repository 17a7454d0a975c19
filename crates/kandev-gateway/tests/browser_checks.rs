//! Issue 42: a task's CI checks in the UI, against a fake GitHub (see
//! `kandev_testkit::fake_github`) on the real stack in headless Chromium.
//! After the approval pushes the branch, the card shows *CI failed*, the
//! task view's checks panel lists the red checks with the end of their
//! output, and **Fix CI** sends the failure to the agent as a follow-up:
//! the mock agent (which echoes a prompt it has no scenario for) answers
//! with the failure's text, in the session whose clone the approval
//! removed (made again from the pushed branch).
//!
//! Screenshots go to `<workspace>/target/screenshots/checks-*.png`.

mod support;

use kandev_orchestrator::forge::{Forge, ForgeKind};
use kandev_testkit::fake_github::{BUILD_TAIL, FakeGithub, JOB_LOG_TAIL};
use serde_json::{Value, json};
use support::*;

/// What the checks panel shows.
const PANEL: &str = "
    const panel = document.querySelector('[data-testid=checks-panel]');
    const checks = [...document.querySelectorAll('[data-testid=check]')];
    if (!panel || panel.hidden || checks.length < 4) return false;
    const fix = document.querySelector('[data-testid=fix-ci]');
    return { state: panel.dataset.state,
             checks: checks.map(c => [[...c.childNodes].slice(0, 3).map(n => n.textContent).join(''), c.dataset.state]),
             logs: [...document.querySelectorAll('[data-testid=check-log]')].map(l => l.textContent.slice(-200)),
             fix: !fix.hidden && fix.textContent };";

/// The forge of every `file:///` repository: a fake GitHub at `api_url`.
fn github_at(api_url: String) -> Forge {
    Forge {
        repository_prefix: "file:///".into(),
        kind: ForgeKind::Github,
        api_url,
        token: "t0ken".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_red_check_shows_and_fix_ci_sends_it_to_the_agent() {
    let Some(browser) = start_browser().await else {
        return;
    };
    let forge = FakeGithub::red("t0ken").await;
    let api_url = forge.url.clone();
    let stack = start_stack_tuned(true, move |s| {
        s.forges = vec![github_at(api_url)];
        s.checks_poll_ms = 200;
    })
    .await;
    let c = &browser.client;
    login(c, &stack.base).await;
    let repo = stack.git_repo("checked");
    forge.serve(repo.trim_start_matches("file:///"), vec![]);
    let board = new_board(c, "Checked").await;
    let task = new_task(
        c,
        &board,
        json!({"title": "Fix the login", "description": "scenario: code",
               "agent_type": "mock-agent", "repository_url": repo, "max_retries": 0}),
    )
    .await;
    go(c, &format!("#/boards/{board}")).await;
    wait_in_column(c, "the task in review", "REVIEW", &task, 120).await;
    let approved = api(
        c,
        "POST",
        &format!("/tasks/{task}/review"),
        json!({"action": "approve", "message": "Fix the login"}),
    )
    .await;
    assert_eq!(approved["status"], 200, "{approved}");

    // The card: CI failed, from the task's metadata.
    let badge = wait_js(
        c,
        "the card's CI badge",
        60,
        "const b = document.querySelector(arguments[0] + ' [data-testid=card-checks]');
         return b && b.dataset.checks === 'failure' ? b.textContent : false;",
        vec![json!(card(&task))],
    )
    .await;
    assert_eq!(badge, "CI failed");
    screenshot(c, "checks-card.png").await;

    // The task view: each check, the failed ones' output, and Fix CI.
    go(c, &format!("#/tasks/{task}")).await;
    let shown = wait_js(c, "the checks panel", 30, PANEL, vec![]).await;
    assert_eq!(shown["state"], "failure", "{shown}");
    assert_eq!(
        shown["checks"],
        json!([
            ["failure build", "failure"],
            ["failure unit-tests", "failure"],
            ["success lint", "success"],
            ["success ci/docs", "success"]
        ]),
        "{shown}"
    );
    let logs: Vec<&str> = shown["logs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(logs.iter().any(|l| l.ends_with(BUILD_TAIL)), "{shown}");
    assert!(logs.iter().any(|l| l.contains(JOB_LOG_TAIL)), "{shown}");
    assert_eq!(shown["fix"], "Fix CI", "{shown}");
    screenshot(c, "checks-panel.png").await;

    click(c, "[data-testid=fix-ci]").await;
    wait_js(
        c,
        "Fix CI sent once",
        30,
        "const b = document.querySelector('[data-testid=fix-ci]');
         return !b.hidden && b.textContent === 'Fix CI again';",
        vec![],
    )
    .await;
    // The agent got the failure: its echo of the prompt is in the feed.
    wait_js(
        c,
        "the agent's answer with the failure",
        120,
        "return window.kandevDebug.feed.items.some(i => i.kind === 'message' && i.role === 'agent'
           && i.text.includes(arguments[0]) && i.text.includes(arguments[1]));",
        vec![json!(BUILD_TAIL), json!(JOB_LOG_TAIL)],
    )
    .await;
    screenshot(c, "checks-fixed.png").await;
    finish_clean(browser, stack).await;
}

/// A board's tracker link in the UI, against a fake GitHub: the board's
/// **Tracker** dialog shows the linked repository, its label and its last
/// sync; a link to a repository GitHub does not have shows why, in plain
/// words; an unlinked board says so and refuses a token secret the user
/// does not have. The 404 of the unlinked board's link and the 400 of the
/// refused secret are the only console errors, and expected.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_boards_tracker_link_and_its_error_show() {
    use kandev_testkit::fake_github::issue;
    let Some(browser) = start_browser().await else {
        return;
    };
    let forge = FakeGithub::start().await;
    let api_url = forge.url.clone();
    let stack = start_stack_tuned(false, move |s| {
        s.forges = vec![github_at(api_url)];
        s.tracker_reconcile_secs = 1;
    })
    .await;
    let c = &browser.client;
    login(c, &stack.base).await;
    let url = stack.git_repo("tracked");
    let repo = url.trim_start_matches("file:///").to_string();
    forge.serve(
        &repo,
        vec![issue(&repo, 1, "Say hello", "echo hello", &["kandev"])],
    );
    let gone_url = stack.git_repo("gone");

    for (name, url, words) in [
        ("Tracked", url.as_str(), None),
        ("Gone", gone_url.as_str(), Some("was not found on GitHub")),
    ] {
        let board = new_board(c, name).await;
        let linked = api(
            c,
            "POST",
            &format!("/boards/{board}/tracker"),
            json!({"kind": "github", "repository_url": url, "label": "kandev",
                   "agent_type": "mock-agent", "webhook_secret": "whsec-browser"}),
        )
        .await;
        assert_eq!(linked["status"], 200, "{linked}");
        let path = format!("/boards/{board}/tracker");
        let synced = wait_js(
            c,
            "the link synced",
            30,
            "return fetch('/api/v1' + arguments[0],
                 { headers: { Authorization: 'Bearer ' + sessionStorage.getItem('kandev.token') } })
               .then((r) => r.json()).then((l) => (l.last_synced_at ? l : false));",
            vec![json!(path)],
        )
        .await;
        go(c, &format!("#/boards/{board}")).await;
        click(c, "[data-testid=edit-tracker]").await;
        let shown = wait_js(
            c,
            "the tracker dialog",
            20,
            "const s = document.querySelector('[data-testid=tracker] [data-testid=tracker-status]');
             if (!s) return false;
             const e = document.querySelector('[data-testid=tracker-last-error]');
             return { status: s.textContent, repository: s.dataset.repository || null,
                      error: e ? e.textContent : null,
                      kind: document.querySelector('[data-testid=tracker-kind]').value,
                      url: document.querySelector('[data-testid=tracker] input[name=repository_url]').value };",
            vec![],
        )
        .await;
        assert_eq!(shown["url"], url, "{shown}");
        assert_eq!(shown["kind"], "github", "{shown}");
        assert!(
            shown["status"]
                .as_str()
                .unwrap()
                .contains("on GitHub (issues labelled “kandev”); last synced"),
            "{shown}"
        );
        match words {
            None => {
                assert_eq!(shown["repository"], repo.as_str(), "{shown}");
                assert_eq!(shown["error"], Value::Null, "{shown}");
                assert_eq!(synced["last_error"], "", "{synced}");
            }
            Some(words) => {
                let error = shown["error"].as_str().unwrap_or_default();
                assert!(
                    error.starts_with("The last sync failed: ") && error.contains(words),
                    "{shown}"
                );
            }
        }
        screenshot(c, &format!("tracker-{}.png", name.to_lowercase())).await;
        click(c, "[data-testid=tracker-cancel]").await;
    }

    // An unlinked board: said so; a token secret the user has none of is
    // refused in the dialog, and nothing is linked.
    let board = new_board(c, "Unlinked").await;
    go(c, &format!("#/boards/{board}")).await;
    click(c, "[data-testid=edit-tracker]").await;
    let status = wait_js(
        c,
        "the unlinked board's dialog",
        20,
        "return document.querySelector('[data-testid=tracker] [data-testid=tracker-status]')?.textContent || false;",
        vec![],
    )
    .await;
    assert_eq!(status, "Not linked to an issue tracker.");
    let forges = wait_js(
        c,
        "the forges offered",
        20,
        "const o = [...document.querySelectorAll('[data-testid=tracker-kind] option')];
         return o.length ? o.map((x) => [x.value, x.textContent]) : false;",
        vec![],
    )
    .await;
    assert_eq!(forges, json!([["github", "GitHub"], ["gitlab", "GitLab"]]));
    type_into(c, "[data-testid=tracker] input[name=repository_url]", &url).await;
    type_into(
        c,
        "[data-testid=tracker] input[name=token_secret]",
        "NO_SUCH_TOKEN",
    )
    .await;
    click(c, "[data-testid=tracker-submit]").await;
    let refused = wait_js(
        c,
        "the refusal",
        20,
        "const e = document.querySelector('[data-testid=tracker-error]');
         return e && !e.hidden ? e.textContent : false;",
        vec![],
    )
    .await;
    assert!(
        refused.as_str().unwrap().contains("NO_SUCH_TOKEN"),
        "{refused}"
    );
    let none = api(c, "GET", &format!("/boards/{board}/tracker"), Value::Null).await;
    assert_eq!(none["status"], 404, "{none}");

    let errors: Vec<String> = browser
        .console_errors()
        .await
        .into_iter()
        .filter(|e| {
            let expected = e.contains(&format!("/api/v1/boards/{board}/tracker"))
                && (e.contains("status of 404") || e.contains("status of 400"));
            !expected
        })
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    finish(browser, stack).await;
}
