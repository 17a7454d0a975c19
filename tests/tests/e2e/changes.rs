//! Each task works on its own branch in its own clone, and its changes
//! (files and diffs against the base) are read through the gateway.

use kandev_e2e::{Options, Stack, serde_json::json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tasks_on_one_repository_get_their_own_branch_and_changes() {
    let stack = Stack::start("changes", Options::default()).await;
    let api = stack.admin().await;
    let board = api.board("changes").await;
    let repo = stack.git_repo("shared");
    let mut tasks = Vec::new();
    for title in ["Fix the readme", "Polish the readme"] {
        tasks.push(
            api.task(
                &board,
                json!({"title": title, "description": "scenario: code",
                       "agent_type": "mock-agent", "repository_url": repo, "max_retries": 0}),
            )
            .await,
        );
    }
    let mut seen = Vec::new();
    for (task, slug) in tasks.iter().zip(["fix-the-readme", "polish-the-readme"]) {
        api.wait_state(task, &["COMPLETED"], 180).await;
        let changes = api.get(&format!("/api/v1/tasks/{task}/changes")).await;
        assert_eq!(changes.status, 200, "{}", changes.body);
        let c = &changes.body;
        let short = &task.replace('-', "")[24..];
        assert_eq!(c["branch"], format!("kandev/{short}-{slug}"), "{c}");
        assert_eq!(c["base_branch"], "main", "{c}");
        assert_eq!(c["base_commit"].as_str().unwrap().len(), 40, "{c}");
        let files = c["files"].as_array().expect("files");
        let readme = files
            .iter()
            .find(|f| f["path"] == "README.md")
            .unwrap_or_else(|| panic!("README.md not in {c}"));
        assert_eq!(readme["status"], "modified", "{c}");
        assert!(readme["additions"].as_i64().unwrap() >= 1, "{c}");
        seen.push((
            c["branch"].as_str().unwrap().to_string(),
            c["workspace_path"].as_str().unwrap().to_string(),
        ));

        let diff = api
            .get(&format!("/api/v1/tasks/{task}/changes/diff?path=README.md"))
            .await;
        assert_eq!(diff.status, 200, "{}", diff.body);
        let text = diff.body["diff"].as_str().unwrap();
        assert!(
            text.contains("+Edited by kandev-mock-agent (turn 1)."),
            "{text}"
        );
        let unchanged = api
            .get(&format!(
                "/api/v1/tasks/{task}/changes/diff?path=nothing.txt"
            ))
            .await;
        assert_eq!(unchanged.status, 404, "{}", unchanged.body);
    }
    // Separate branches in separate working trees.
    assert_ne!(seen[0].0, seen[1].0);
    assert_ne!(seen[0].1, seen[1].1);

    // A task without a clone has no changes to show; another user sees
    // nothing of this task.
    let plain = api.task(&board, json!({"title": "No repository"})).await;
    let none = api.get(&format!("/api/v1/tasks/{plain}/changes")).await;
    assert_eq!(none.status, 404, "{}", none.body);
    let made = api
        .post(
            "/api/v1/users",
            json!({"username": "carol", "password": "correct horse battery"}),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let carol = stack.login("carol", "correct horse battery").await;
    let hidden = carol
        .get(&format!("/api/v1/tasks/{}/changes", tasks[0]))
        .await;
    assert_eq!(hidden.status, 404, "{}", hidden.body);
    stack.stop().await;
}
