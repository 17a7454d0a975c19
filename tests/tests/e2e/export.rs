//! `kandev export`: a one-machine installation moves to the four services
//! on Postgres with its users, boards, tasks and feeds, and goes on there.

use std::process::Output;

use kandev_e2e::{ADMIN_PASSWORD, Api, Feed, Options, Stack, Svc, is_turn_end, mock_task, replay};

/// Runs `kandev export` on `stack`'s data directory.
async fn export(stack: &Stack, url: &str, replace: bool) -> Output {
    let mut cmd = tokio::process::Command::new(kandev_e2e::binary("kandev"));
    cmd.arg("export")
        .arg(url)
        .arg("--data-dir")
        .arg(stack.data_dir())
        .kill_on_drop(true);
    if replace {
        cmd.arg("--replace");
    }
    tokio::time::timeout(std::time::Duration::from_secs(120), cmd.output())
        .await
        .expect("the export ends within 2 min")
        .expect("kandev export runs")
}

/// A mock-agent task on `board`, run to its end; its id.
async fn run_one(api: &Api, board: &str, title: &str) -> String {
    let task = api.task(board, mock_task(title, "scenario: echo hi")).await;
    let mut feed = Feed::open(api, &task).await;
    feed.wait_for(120, "the turn_end", is_turn_end).await;
    feed.close().await;
    api.wait_state(&task, &["COMPLETED", "REVIEW"], 60).await;
    task
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kandev_export_moves_an_installation_to_the_four_services() {
    // One machine: a second user, a board, a task whose run completed.
    let mut one = Stack::start("export_single", Options::single()).await;
    let api = one.admin().await;
    let maria = one.user(&api, "maria", "maria-password-1").await;
    maria.set_secret("MARIA_TOKEN", "maria-own-value").await;
    let secrets = maria.get("/api/v1/users/me/secrets").await.body;
    let board = api.board("moving").await;
    let task = run_one(&api, &board, "Before the move").await;
    let stored = replay(&api, &task).await;
    let before = api.get(&format!("/api/v1/tasks/{task}")).await.body;
    let boards = api.get("/api/v1/boards").await.body;

    // The deployment: the four services made their schemas, then stopped.
    let mut four = Stack::start("export_four", Options::default()).await;
    for svc in Svc::ALL {
        four.kill(svc);
    }
    let url = four.database_url().expect("on Postgres").to_string();

    // While kandev runs, its data stays put.
    let out = export(&one, &url, false).await;
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("another kandev runs on the data directory"),
        "{}",
        text(&out)
    );
    one.kill(Svc::Gateway);

    // The deployment's gateway made its admin: a target holding data is
    // refused, and nothing of it changes.
    let out = export(&one, &url, false).await;
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("gateway.users (1 rows)") && text(&out).contains("--replace"),
        "{}",
        text(&out)
    );
    let out = export(&one, &url, true).await;
    eprintln!("{}", text(&out));
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("task_service.tasks: 1 rows"),
        "{}",
        text(&out)
    );

    // The four services serve what kandev held.
    for svc in Svc::ALL {
        four.spawn(svc).await;
    }
    let moved = four.admin().await;
    assert_eq!(moved.get("/api/v1/boards").await.body, boards);
    assert_eq!(
        moved.get(&format!("/api/v1/tasks/{task}")).await.body,
        before
    );
    assert_eq!(replay(&moved, &task).await, stored, "the feed moved whole");
    // The second user, and the secret she sealed.
    let maria = four.login("maria", "maria-password-1").await;
    assert_ne!(ADMIN_PASSWORD, "maria-password-1");
    assert_eq!(maria.get("/api/v1/users/me/secrets").await.body, secrets);
    assert!(secrets.to_string().contains("MARIA_TOKEN"), "{secrets}");

    // And goes on: a new task on the moved board runs, numbered afresh.
    run_one(&moved, &board, "After the move").await;
    let listed = moved
        .get(&format!("/api/v1/boards/{board}/tasks"))
        .await
        .body;
    assert_eq!(
        listed["tasks"].as_array().map(Vec::len),
        Some(2),
        "both tasks on the board: {listed}"
    );
    four.stop().await;
    one.stop().await;
}
