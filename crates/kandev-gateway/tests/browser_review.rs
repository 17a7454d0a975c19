//! Issue 40: the review features of the task page's Changes tab and the
//! board's cards, walked in headless Chromium on the real stack (see
//! `support`): a comment written from the keyboard (two lines), changes
//! requested, the comments kept inline after the agent's next turn (and
//! outdated where their line is gone), resolved and opened again; the
//! Unified / Side by side switch, remembered and falling back to unified
//! on narrow windows; the card's repository, branch and pull request.
//! Layout is checked at 1440×900, 800×900 and 390×844: no sideways scroll
//! (the diff's own code box aside), no console error.
//!
//! Screenshots go to `<workspace>/target/screenshots/review-*.png`.

mod support;

use fantoccini::Client;
use serde_json::{Value, json};
use support::*;

/// The stack (a finished run leaves its task in REVIEW) and a logged-in
/// browser.
async fn setup() -> Option<(Browser, Stack)> {
    start_ui(true).await
}

/// A `scenario: code` task on `repo`, run to REVIEW, its Changes tab open
/// on README.md; its id.
async fn task_in_review(c: &Client, stack: &Stack, repo: &str, title: &str) -> String {
    let task_id = new_code_task(c, title, title, repo).await;
    open_in_review(c, &stack.base, &task_id).await;
    click(c, "[data-testid=tab-changes]").await;
    wait_js(
        c,
        "README.md's diff",
        30,
        "const d = document.querySelector('[data-testid=changes-file-diff][data-path=\"README.md\"]');
         return !!d && d.querySelectorAll('[data-new-line]').length > 0;",
        vec![],
    )
    .await;
    task_id
}

/// What has the focus: its test id, the diff line it is and its view.
const FOCUSED: &str = "
    const a = document.activeElement;
    return { testid: a.dataset.testid || '', line: a.dataset.newLine || '',
             view: (a.parentElement && a.parentElement.dataset.testid) || '' };";

/// The threads under new line `arguments[0]` in the view on screen.
const THREADS_UNDER: &str = "
    const row = [...document.querySelectorAll('[data-testid=changes-file-diff] [data-new-line=\"' + arguments[0] + '\"]')]
      .find(r => r.offsetParent !== null);
    if (!row) return null;
    const out = [];
    for (let t = row.nextElementSibling; t && t.dataset.testid === 'review-thread'; t = t.nextElementSibling) {
      out.push({ body: t.querySelector('[data-testid=review-thread-body]').textContent,
                 pending: t.classList.contains('pending'), resolved: t.dataset.resolved,
                 head: t.querySelector('.review-thread-head').textContent,
                 button: (t.querySelector('[data-testid=review-resolve]') || {}).textContent || '' });
    }
    return out;";

/// Marks the Resolve button of the first thread under new line 4 on
/// screen, so that it can be clicked as a person does.
const MARK_RESOLVE: &str = "
    const row = [...document.querySelectorAll('[data-testid=changes-file-diff] [data-new-line=\"4\"]')]
      .find(r => r.offsetParent !== null);
    document.querySelectorAll('[data-walk]').forEach(e => e.removeAttribute('data-walk'));
    row.nextElementSibling.querySelector('[data-testid=review-resolve]').dataset.walk = 'resolve';
    return true;";

// ------------------------------------------------------------- comments

/// A comment written from the keyboard (two lines) goes with a request
/// for changes; after the agent's next turn it shows under its line, kept;
/// a later one on a line that is gone shows above the file as outdated;
/// resolving and reopening work from the page.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_review_written_from_the_keyboard_is_kept_and_resolved() {
    let Some((browser, stack)) = setup().await else {
        return;
    };
    let c = &browser.client;
    set_viewport(c, DESKTOP.0, DESKTOP.1).await;
    let repo = stack.git_repo("review");
    let task = task_in_review(c, &stack, &repo, "Review from the keyboard").await;
    click(c, "[data-testid=diff-view-unified]").await;
    comment_from_the_keyboard(c).await;
    escape_closes_the_box(c).await;
    type_into(c, "[data-testid=review-message]", "scenario: code").await;
    click(c, "[data-testid=review-request-changes]").await;
    kept_after_the_next_turn(c).await;
    // The page may show REVIEW from before the turn; the API says when
    // the turn ended.
    wait_task_state(c, &task, "REVIEW", 120).await;
    screenshot(c, "review-kept-1440.png").await;

    // A later round on a line that is gone: outdated, above the file; the
    // first round's comment stays under its line.
    let asked = api(
        c,
        "POST",
        &format!("/tasks/{task}/review"),
        json!({"action": "request_changes", "message": "scenario: code",
               "comments": [{"path": "README.md", "line": 99, "line_text": "Gone",
                             "body": "A line that is gone."}]}),
    )
    .await;
    assert_eq!(asked["status"], 200, "{asked}");
    outdated_above_the_file(c).await;
    resolve_and_reopen(c, &task).await;
    for (width, height) in [SMALL, PHONE] {
        set_viewport(c, width, height).await;
        let under = js(c, THREADS_UNDER, vec![json!("4")]).await;
        assert_eq!(under[0]["body"], "First line\nSecond line", "{width} px");
        assert_fits(c, &format!("the kept comments at {width} px")).await;
        js(c, &format!("{MARK_RESOLVE} document.querySelector('[data-walk=resolve]').scrollIntoView({{block: 'center'}}); return true;"), vec![]).await;
        screenshot(c, &format!("review-kept-{width}.png")).await;
    }
    finish_clean(browser, stack).await;
}

/// Tab reaches the diff's first line, ↓ goes down line by line, C opens
/// the box on the focused line; Enter is a new line, Ctrl+Enter adds the
/// comment, and the focus goes back to the line.
async fn comment_from_the_keyboard(c: &Client) {
    js(
        c,
        "document.querySelector('[data-testid=review-file-comment]').focus(); return true;",
        vec![],
    )
    .await;
    press(c, TAB).await;
    let at = js(c, FOCUSED, vec![]).await;
    assert_eq!(at["line"], "1", "Tab reaches the first line: {at}");
    assert_eq!(at["view"], "changes-diff-unified", "{at}");
    for line in ["2", "3", "4"] {
        press(c, ARROW_DOWN).await;
        assert_eq!(js(c, FOCUSED, vec![]).await["line"], line);
    }
    press(c, "c").await;
    let open = wait_js(
        c,
        "the comment box on line 4, focused",
        10,
        "const box = document.querySelector('[data-testid=review-comment-box]');
         return !!box && document.activeElement.dataset.testid === 'review-comment-input'
           && { target: box.querySelector('[data-testid=review-target]').textContent,
                hint: box.querySelector('[data-testid=review-comment-hint]').textContent,
                tag: document.activeElement.tagName,
                after: box.previousElementSibling.dataset.newLine };",
        vec![],
    )
    .await;
    assert_eq!(open["target"], "README.md, line 4", "{open}");
    assert_eq!(open["tag"], "TEXTAREA", "{open}");
    assert_eq!(open["after"], "4", "the box is under its line: {open}");
    let hint = open["hint"].as_str().unwrap();
    assert!(
        hint.contains("Enter starts a new line") && hint.contains("Ctrl+Enter"),
        "{hint}"
    );
    press(c, "First line").await;
    press(c, ENTER).await;
    press(c, "Second line").await;
    let typed = js(
        c,
        "return document.querySelector('[data-testid=review-comment-input]')?.value;",
        vec![],
    )
    .await;
    assert_eq!(typed, "First line\nSecond line", "Enter is a new line");
    box_survives_a_reload(c).await;
    click(c, "[data-testid=review-comment-input]").await;
    press(c, CTRL_ENTER).await;
    wait_js(
        c,
        "the draft under line 4 and the focus back on the line",
        10,
        "const a = document.activeElement;
         return !document.querySelector('[data-testid=review-comment-box]')
           && a.dataset.newLine === '4'
           && document.querySelectorAll('[data-testid=review-comment]').length === 1;",
        vec![],
    )
    .await;
    let under = js(c, THREADS_UNDER, vec![json!("4")]).await;
    assert_eq!(
        under,
        json!([{"body": "First line\nSecond line", "pending": true, "resolved": "false",
                "head": "Pending", "button": ""}])
    );
}

/// The diff drawn again (Refresh) keeps the open box, with what is typed
/// in it, under its line.
async fn box_survives_a_reload(c: &Client) {
    js(
        c,
        "document.querySelector('[data-testid=changes-file-diff]').dataset.walk = 'before'; return true;",
        vec![],
    )
    .await;
    click(c, "[data-testid=changes-refresh]").await;
    let kept = wait_js(
        c,
        "the diff drawn again, the box still under line 4",
        20,
        "const d = document.querySelector('[data-testid=changes-file-diff]');
         const box = document.querySelector('[data-testid=review-comment-box]');
         return !!d && !d.dataset.walk && !!box && d.contains(box)
           && { after: box.previousElementSibling.dataset.newLine,
                value: box.querySelector('textarea').value };",
        vec![],
    )
    .await;
    assert_eq!(
        kept,
        json!({"after": "4", "value": "First line\nSecond line"}),
        "the box and its text survive the reload"
    );
}

/// Enter opens the box too; Escape closes it without a comment and gives
/// the focus back to the line.
async fn escape_closes_the_box(c: &Client) {
    press(c, ENTER).await;
    wait_js(
        c,
        "the box open again",
        10,
        "return document.activeElement.dataset.testid === 'review-comment-input';",
        vec![],
    )
    .await;
    press(c, "Not this one").await;
    press(c, ESCAPE).await;
    let back = wait_js(
        c,
        "the box closed, the focus on line 4",
        10,
        "return !document.querySelector('[data-testid=review-comment-box]')
           && document.activeElement.dataset.newLine === '4'
           && document.querySelectorAll('[data-testid=review-comment]').length;",
        vec![],
    )
    .await;
    assert_eq!(back, 1, "Escape added nothing");
}

/// After the agent's second turn (REVIEW again, a fifth line), the
/// comment is under its line, kept (round 1, by admin); the message is
/// among the comments on the whole change.
async fn kept_after_the_next_turn(c: &Client) {
    wait_js(
        c,
        "the second turn's edit, REVIEW again, the comment kept under line 4",
        120,
        &format!(
            "const d = document.querySelector('[data-testid=changes-file-diff]');
             const under = (() => {{ {THREADS_UNDER} }})();
             return (() => {{ {IN_REVIEW} }})() && !!d && !!d.querySelector('[data-new-line=\"5\"]')
               && !!under && under.length === 1 && !under[0].pending;"
        ),
        vec![json!("4")],
    )
    .await;
    let under = js(c, THREADS_UNDER, vec![json!("4")]).await;
    assert_eq!(under[0]["body"], "First line\nSecond line");
    let head = under[0]["head"].as_str().unwrap();
    assert!(
        head.starts_with("admin") && head.contains("round 1"),
        "{head}"
    );
    assert_eq!(under[0]["button"], "Resolve");
    let general = js(
        c,
        "const g = document.querySelector('[data-testid=review-general]');
         return !g.hidden && [...g.querySelectorAll('[data-testid=review-thread-body]')].map(b => b.textContent);",
        vec![],
    )
    .await;
    assert_eq!(general, json!(["scenario: code"]), "the message is kept");
    let drafts = js(
        c,
        "return document.querySelectorAll('[data-testid=review-comment]').length;",
        vec![],
    )
    .await;
    assert_eq!(drafts, 0, "sent: no draft left");
}

/// After the third turn (a sixth line), the comment on line 99 is above
/// the file, marked outdated; the first one is still under line 4.
async fn outdated_above_the_file(c: &Client) {
    let above = wait_js(
        c,
        "the third turn, and the outdated comment above the file",
        120,
        &format!(
            "const d = document.querySelector('[data-testid=changes-file-diff]');
             const box = document.querySelector('[data-testid=changes-file-threads]');
             const threads = box ? [...box.querySelectorAll('[data-testid=review-thread]')] : [];
             return (() => {{ {IN_REVIEW} }})() && !!d && !!d.querySelector('[data-new-line=\"6\"]')
               && threads.length === 1 && !box.hidden
               && {{ outdated: threads[0].dataset.outdated,
                     badge: !!threads[0].querySelector('[data-testid=review-thread-outdated]'),
                     text: threads[0].textContent }};"
        ),
        vec![],
    )
    .await;
    assert_eq!(above["outdated"], "true", "{above}");
    assert_eq!(above["badge"], true, "{above}");
    let text = above["text"].as_str().unwrap();
    assert!(
        text.contains("A line that is gone.") && text.contains("README.md, line 99"),
        "{text}"
    );
    let under = js(c, THREADS_UNDER, vec![json!("4")]).await;
    assert_eq!(
        under[0]["body"], "First line\nSecond line",
        "kept on round 2"
    );
}

/// Resolve from the page, then reopen; the API says the same.
async fn resolve_and_reopen(c: &Client, task: &str) {
    for (resolved, button, by) in [
        ("true", "Unresolve", json!("admin")),
        ("false", "Resolve", Value::Null),
    ] {
        js(c, MARK_RESOLVE, vec![]).await;
        click(c, "[data-walk=resolve]").await;
        let under = wait_js(
            c,
            &format!("the comment under line 4 resolved: {resolved}"),
            10,
            &format!(
                "const under = (() => {{ {THREADS_UNDER} }})();
                 return !!under && under[0].resolved === '{resolved}' && under[0];"
            ),
            vec![json!("4")],
        )
        .await;
        assert_eq!(under["button"], button, "{under}");
        let focused = js(c, "return document.activeElement.dataset.testid;", vec![]).await;
        assert_eq!(focused, "review-resolve", "the focus stays on the button");
        let listed = api(
            c,
            "GET",
            &format!("/tasks/{task}/review/comments"),
            Value::Null,
        )
        .await;
        let comment = listed["body"]["comments"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["line"] == 4)
            .cloned()
            .expect("the line 4 comment");
        assert_eq!(comment["resolved"].to_string(), resolved, "{comment}");
        assert_eq!(comment["resolved_by"], by, "{comment}");
    }
}

// ------------------------------------------------------------ the views

/// Which view of the diff shows, the switch's state and the stored choice.
const VIEW: &str = "
    const shown = (id) => { const e = document.querySelector('[data-testid=' + id + ']'); return !!e && e.offsetParent !== null; };
    const sw = document.querySelector('[data-testid=diff-view]');
    return { unified: shown('changes-diff-unified'), split: shown('changes-diff-split'),
             switch: !!sw && sw.offsetParent !== null,
             pressed: [...document.querySelectorAll('[data-testid=diff-view] [aria-pressed=true]')].map(b => b.dataset.testid),
             stored: localStorage.getItem('kandev.diffView') };";

/// The unified diff's own box scrolls sideways (a long line), the page not.
const CODE_BOX_SCROLLS: &str = "
    const b = document.querySelector('[data-testid=changes-diff-unified]');
    return b.scrollWidth > b.clientWidth && getComputedStyle(b).overflowX === 'auto';";

/// A repository whose README's line 3 is long, so that its diff is wider
/// than a phone.
fn repo_with_a_long_line(stack: &Stack) -> String {
    let url = stack.git_repo("long-line");
    let dir = url.trim_start_matches("file://");
    let long = "A line much longer than a phone is wide: ".repeat(6);
    std::fs::write(format!("{dir}/README.md"), format!("# Demo\n\n{long}\n")).unwrap();
    kandev_testkit::git(std::path::Path::new(dir), &["commit", "-qam", "long"]);
    url
}

/// Side by side by default on a wide window; the switch's choice is kept
/// over a reload; below 900 px the diff is unified (the switch hidden) and
/// only its own code box scrolls sideways.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_diff_view_switch_is_remembered_and_narrow_windows_get_unified() {
    let Some((browser, stack)) = setup().await else {
        return;
    };
    let c = &browser.client;
    set_viewport(c, DESKTOP.0, DESKTOP.1).await;
    let repo = repo_with_a_long_line(&stack);
    task_in_review(c, &stack, &repo, "Switch the view").await;
    let view = js(c, VIEW, vec![]).await;
    assert_eq!(
        view,
        json!({"unified": false, "split": true, "switch": true,
               "pressed": ["diff-view-split"], "stored": null}),
        "side by side on a wide window"
    );
    for (choice, unified) in [("unified", true), ("split", false)] {
        click(c, &format!("[data-testid=diff-view-{choice}]")).await;
        let view = js(c, VIEW, vec![]).await;
        assert_eq!(
            view,
            json!({"unified": unified, "split": !unified, "switch": true,
                   "pressed": [format!("diff-view-{choice}")], "stored": choice}),
            "{choice}"
        );
    }
    click(c, "[data-testid=diff-view-unified]").await;
    c.refresh().await.expect("reload");
    wait_js(c, "the task again", 30, IN_REVIEW, vec![]).await;
    click(c, "[data-testid=tab-changes]").await;
    wait_js(
        c,
        "the unified diff after the reload",
        30,
        &format!("const v = (() => {{ {VIEW} }})(); return v.unified && !v.split && v.stored === 'unified';"),
        vec![],
    )
    .await;
    assert_fits(c, "the unified diff at 1440 px").await;
    screenshot(c, "review-unified-1440.png").await;
    click(c, "[data-testid=diff-view-split]").await;
    assert_fits(c, "the side-by-side diff at 1440 px").await;
    screenshot(c, "review-split-1440.png").await;
    narrow_windows_get_unified(c).await;
    set_viewport(c, DESKTOP.0, DESKTOP.1).await;
    let view = js(c, VIEW, vec![]).await;
    assert_eq!(
        view["split"], true,
        "the choice is back on a wide window: {view}"
    );
    finish_clean(browser, stack).await;
}

/// Side by side chosen, a small window and a phone show the unified diff;
/// nothing but the diff's code box scrolls sideways.
async fn narrow_windows_get_unified(c: &Client) {
    for (width, height) in [SMALL, PHONE] {
        set_viewport(c, width, height).await;
        let view = js(c, VIEW, vec![]).await;
        assert_eq!(
            view,
            json!({"unified": true, "split": false, "switch": false,
                   "pressed": ["diff-view-split"], "stored": "split"}),
            "{width} px"
        );
        assert_fits(c, &format!("the diff at {width} px")).await;
        assert_eq!(
            js(c, CODE_BOX_SCROLLS, vec![]).await,
            true,
            "the code box scrolls at {width} px"
        );
        screenshot(c, &format!("review-diff-{width}.png")).await;
    }
}

// ------------------------------------------------------------- the card

/// The cards' repository, branch and pull request, per task title.
const CARDS: &str = "
    const out = {};
    for (const k of document.querySelectorAll('[data-testid=column] [data-testid=card]')) {
      const q = (id) => k.querySelector('[data-testid=' + id + ']');
      const pr = q('card-pr');
      out[k.querySelector('[data-testid=card-link]').textContent] = {
        repo: q('card-repo-name')?.textContent ?? null, repo_title: q('card-repo-name')?.title ?? null,
        branch: q('card-branch')?.textContent ?? null,
        pr: pr ? { text: pr.textContent, href: pr.getAttribute('href'), target: pr.target, rel: pr.rel } : null };
    }
    return out;";

/// Every piece of each card's repository line inside its card; those cut
/// (wider than their box) say so with an ellipsis.
const CARD_PIECES: &str = "
    const cut = [], outside = [];
    for (const k of document.querySelectorAll('[data-testid=column] [data-testid=card]')) {
      const c = k.getBoundingClientRect();
      for (const e of k.querySelectorAll('[data-testid=card-repo] > *')) {
        const r = e.getBoundingClientRect();
        if (r.right > c.right + 0.5 || r.left < c.left - 0.5) outside.push(e.textContent);
        if (e.scrollWidth > e.clientWidth) {
          const s = getComputedStyle(e);
          cut.push({ text: e.textContent, ellipsis: s.textOverflow === 'ellipsis' && s.whiteSpace === 'nowrap' });
        }
      }
    }
    return { cut, outside };";

/// The card shows the repository's short name, the branch (the delivered
/// one, else the base) and a link to the pull request approval opened
/// (set here through the task's metadata), cut with an ellipsis and never
/// wider than the card; a link that is not http(s) is not one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_card_shows_the_repository_branch_and_pull_request() {
    let Some((browser, stack)) = setup().await else {
        return;
    };
    let c = &browser.client;
    let board = api(c, "POST", "/boards", json!({"name": "Cards"})).await;
    let board_id = board["body"]["id"].as_str().unwrap().to_string();
    let widgets = stack.git_repo("widgets");
    let long_name = stack.git_repo("a-repository-with-a-name-far-too-long-for-any-card-on-a-phone");
    let long_branch = "kandev/0123abcd-a-branch-name-far-too-long-for-any-card-on-a-phone";
    for (title, repo, delivered) in [
        (
            "Delivered",
            &widgets,
            json!({"branch": long_branch,
            "pull_request": "https://github.example/acme/widgets/pull/42"}),
        ),
        ("Not yet", &long_name, json!(null)),
        (
            "Odd link",
            &widgets,
            json!({"pull_request": "javascript:alert(1)"}),
        ),
    ] {
        let metadata = if delivered.is_null() {
            json!({})
        } else {
            json!({"delivered": delivered})
        };
        let made = api(
            c,
            "POST",
            &format!("/boards/{board_id}/tasks"),
            json!({"title": title, "repository_url": repo, "branch": "main", "metadata": metadata}),
        )
        .await;
        assert_eq!(made["status"], 201, "{made}");
    }
    go(c, &format!("#/boards/{board_id}")).await;
    let cards = wait_js(
        c,
        "the three cards",
        20,
        &format!("const k = (() => {{ {CARDS} }})(); return Object.keys(k).length === 3 && k;"),
        vec![],
    )
    .await;
    assert_eq!(
        cards,
        json!({
            "Delivered": {"repo": "widgets", "repo_title": widgets, "branch": long_branch,
                          "pr": {"text": "PR #42", "href": "https://github.example/acme/widgets/pull/42",
                                 "target": "_blank", "rel": "noopener noreferrer"}},
            "Not yet": {"repo": "a-repository-with-a-name-far-too-long-for-any-card-on-a-phone",
                        "repo_title": long_name, "branch": "main", "pr": null},
            "Odd link": {"repo": "widgets", "repo_title": widgets, "branch": "main", "pr": null},
        })
    );
    for (width, height) in [DESKTOP, SMALL, PHONE] {
        set_viewport(c, width, height).await;
        assert_fits(c, &format!("the board at {width} px")).await;
        let pieces = js(c, CARD_PIECES, vec![]).await;
        assert_eq!(pieces["outside"], json!([]), "{width} px: {pieces}");
        for cut in pieces["cut"].as_array().unwrap() {
            assert_eq!(cut["ellipsis"], true, "{width} px: {cut}");
        }
        if width == PHONE.0 {
            let cut: Vec<&str> = pieces["cut"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["text"].as_str().unwrap())
                .collect();
            assert!(
                cut.contains(&long_branch),
                "the long branch is cut: {pieces}"
            );
        }
        screenshot(c, &format!("review-cards-{width}.png")).await;
    }
    finish_clean(browser, stack).await;
}
