//! Each task works on its own branch in its own clone, and its changes
//! (files and diffs against the base) are read through the gateway.

use kandev_e2e::{
    Options, Stack, Svc, merged, mock_task, mock_type,
    serde_json::{Value, json},
    trackers::{Forge, GITHUB_TOKEN},
};
use kandev_testkit::fake_github::FakeGithub;

/// A mock-agent task that edits the README of the repository `repo`.
fn code_task(title: &str, repo: &str) -> Value {
    merged(
        mock_task(title, "scenario: code"),
        json!({"repository_url": repo}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tasks_on_one_repository_get_their_own_branch_and_changes() {
    let (stack, api, board) =
        Stack::start_with_board("changes", Options::default(), "changes").await;
    let repo = stack.git_repo("shared");
    let mut tasks = Vec::new();
    for title in ["Fix the readme", "Polish the readme"] {
        tasks.push(api.task(&board, code_task(title, &repo)).await);
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

    // A task that finished straight to COMPLETED is delivered as well: its
    // branch is committed and pushed, and it stays COMPLETED.
    let delivery = api.approve(&tasks[0], Some("Fix the readme")).await;
    let commit = delivery["commit"].as_str().unwrap().to_string();
    let source = repo.trim_start_matches("file://");
    let pushed = std::process::Command::new("git")
        .args(["-C", source, "rev-parse", &seen[0].0])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&pushed.stdout).trim(), commit);
    let task = api.get(&format!("/api/v1/tasks/{}", tasks[0])).await;
    assert_eq!(task.body["state"], "COMPLETED", "{}", task.body);
    assert_eq!(
        task.body["metadata"]["delivered"]["commit"],
        commit.as_str(),
        "{}",
        task.body
    );
    let rejected = api
        .review(
            &tasks[1],
            json!({"action": "request_changes", "message": "more"}),
        )
        .await;
    assert_eq!(
        rejected.status, 409,
        "only a task in review takes comments: {}",
        rejected.body
    );

    // A task without a clone has no changes to show; another user sees
    // nothing of this task.
    let plain = api.task(&board, json!({"title": "No repository"})).await;
    let none = api.get(&format!("/api/v1/tasks/{plain}/changes")).await;
    assert_eq!(none.status, 404, "{}", none.body);
    let carol = stack.user(&api, "carol", "correct horse battery").await;
    let hidden = carol
        .get(&format!("/api/v1/tasks/{}/changes", tasks[0]))
        .await;
    assert_eq!(hidden.status, 404, "{}", hidden.body);
    stack.stop().await;
}

/// The review loop: comments go back to the agent, whose second turn edits
/// the files; approval commits and pushes the task's branch to the bare
/// remote and completes the task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_changes_then_approve_pushes_the_branch() {
    // A forge for every file:// repository: approval opens a pull request
    // there (no real forge is reachable here).
    let forge = FakeGithub::start().await;
    let options = Options::default()
        .with(Svc::Orchestrator, "KANDEV_COMPLETE_TO_REVIEW", "true")
        .with(Svc::Orchestrator, "KANDEV_FORGES", forge.forges());
    let (stack, api, board) = Stack::start_with_board("review", options, "review").await;
    let bare = stack.bare_repo("review");
    forge.serve(&bare.repo, vec![]);
    let task = api.task(&board, code_task("Review me", &bare.url)).await;
    api.wait_state(&task, &["REVIEW"], 180).await;

    // Outside REVIEW or with nothing to say: refused.
    let empty = api
        .review(&task, json!({"action": "request_changes"}))
        .await;
    assert_eq!(empty.status, 400, "{}", empty.body);
    let bad = api.review(&task, json!({"action": "merge"})).await;
    assert_eq!(bad.status, 400, "{}", bad.body);

    let asked = api
        .review(
            &task,
            json!({"action": "request_changes", "message": "scenario: code",
                   "comments": [{"path": "README.md", "line": 3, "body": "Say more here."}]}),
        )
        .await;
    assert_eq!(asked.status, 200, "{}", asked.body);
    // The comments reached the agent as a prompt in its session, and its
    // second turn edited the file; the task is back in review.
    api.wait_prompt(&task, 120, &["README.md, line 3: Say more here."])
        .await;
    kandev_e2e::eventually(120, "the second turn's edit and REVIEW again", || {
        let api = api.clone();
        let task = task.clone();
        let path = stack.workspace(&task).join("README.md");
        async move {
            let readme = std::fs::read_to_string(&path).unwrap_or_default();
            let state = api.get(&format!("/api/v1/tasks/{task}")).await.body["state"].clone();
            (readme.contains("Edited by kandev-mock-agent (turn 2).") && state == "REVIEW")
                .then_some(())
        }
    })
    .await;

    let delivery = &api.approve(&task, Some("Improve the readme")).await;
    assert_eq!(delivery["committed"], true, "{delivery}");
    let branch = delivery["branch"].as_str().unwrap().to_string();
    assert!(
        branch.starts_with("kandev/") && branch.ends_with("-review-me"),
        "{branch}"
    );
    let done = api.wait_state(&task, &["COMPLETED"], 30).await;
    assert_eq!(
        done["metadata"]["delivered"]["branch"],
        branch.as_str(),
        "{done}"
    );
    // The pull request of the pushed branch, linked on the task.
    let pull = format!("https://github.example/{}/pull/1", bare.repo);
    assert_eq!(delivery["pull_request_url"], pull.as_str(), "{delivery}");
    assert_eq!(
        done["metadata"]["delivered"]["pull_request"],
        pull.as_str(),
        "{done}"
    );
    let asked = forge.forge().pulls.clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].0, format!("Bearer {GITHUB_TOKEN}"));
    assert_eq!(asked[0].1["head"], branch.as_str());
    assert_eq!(asked[0].1["base"], "main");
    assert_eq!(asked[0].1["title"], "Review me");

    // The commit is on the bare remote, with the agent's work.
    let shown = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&bare.path)
        .args(["show", "--format=%H %an %s", "--stat", &branch])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.starts_with(&format!(
            "{} admin Improve the readme",
            delivery["commit"].as_str().unwrap()
        )),
        "{shown}"
    );
    assert!(shown.contains("README.md"), "{shown}");
    let readme = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&bare.path)
        .args(["show", &format!("{branch}:README.md")])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&readme.stdout).contains("(turn 2)."),
        "{}",
        String::from_utf8_lossy(&readme.stdout)
    );
    // Delivered: the clone was removed, so there is nothing to deliver
    // again, and a completed task takes no more comments.
    let again = api.review(&task, json!({"action": "approve"})).await;
    assert_eq!(again.status, 404, "{}", again.body);
    assert!(!stack.workspace(&task).exists());
    let comments = api
        .review(
            &task,
            json!({"action": "request_changes", "message": "more"}),
        )
        .await;
    assert_eq!(comments.status, 409, "{}", comments.body);
    stack.stop().await;
}

/// Clones go when their task is deleted and when a finished task's run
/// ended longer ago than the retention; a task that can still resume (in
/// REVIEW) keeps its clone however old.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clones_are_removed_when_their_task_is_done_or_deleted() {
    let options = [
        ("KANDEV_COMPLETE_TO_REVIEW", "true"),
        ("KANDEV_WORKSPACE_RETENTION_SECS", "1"),
        ("KANDEV_WORKSPACE_SWEEP_SECS", "1"),
        ("KANDEV_REMOVE_WORKSPACE_AFTER_DELIVERY", "false"),
    ]
    .into_iter()
    .fold(Options::default(), |o, (k, v)| {
        o.with(Svc::Orchestrator, k, v)
    });
    let (stack, api, board) = Stack::start_with_board("retention", options, "retention").await;
    let repo = stack.git_repo("retention");
    let task = |title: &'static str| {
        let (api, board, repo) = (api.clone(), board.clone(), repo.clone());
        async move {
            let id = api.task(&board, code_task(title, &repo)).await;
            api.wait_state(&id, &["REVIEW"], 180).await;
            id
        }
    };
    // The one that stays in review finishes its run first: every sweep
    // that finds the other one due has found it due too.
    let kept = task("Stay in review").await;
    let done = task("Approve me").await;
    api.approve(&done, None).await;
    let done_dir = stack.workspace(&done);
    kandev_e2e::eventually(60, "the approved task's clone removed", || {
        let gone = !done_dir.exists();
        async move { gone.then_some(()) }
    })
    .await;
    assert!(
        stack.workspace(&kept).join(".git").is_dir(),
        "a task in review keeps its clone"
    );
    let changes = api.get(&format!("/api/v1/tasks/{kept}/changes")).await;
    assert_eq!(changes.status, 200, "{}", changes.body);
    assert!(
        changes.body["disk_bytes"].as_i64().unwrap() > 0,
        "{}",
        changes.body
    );

    // Deleting the task removes its clone (and so its local branch).
    api.delete_task(&kept).await;
    let kept_dir = stack.workspace(&kept);
    kandev_e2e::eventually(60, "the deleted task's clone removed", || {
        let gone = !kept_dir.exists();
        async move { gone.then_some(()) }
    })
    .await;
    stack.stop().await;
}

/// A run launched directly (`POST /api/v1/agents/launch`), without the
/// orchestrator's queue, leaves a clone too: deleting its task removes it
/// (issue 37: such clones stayed on disk).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_task_removes_the_clone_of_a_direct_launch() {
    let (stack, api, board) =
        Stack::start_with_board("direct_clone", Options::default(), "direct").await;
    let task = api.task(&board, json!({"title": "Direct"})).await;
    let repo = stack.git_repo("direct-src");
    let launched = api
        .post(
            "/api/v1/agents/launch",
            json!({"task_id": task, "agent_type": "mock-agent",
                   "repository_url": repo, "prompt": "scenario: code"}),
        )
        .await;
    assert_eq!(launched.status, 201, "{}", launched.body);
    let id = launched.body["id"].as_str().unwrap().to_string();
    let dir = stack.workspace(&task);
    kandev_e2e::eventually(120, "the direct run finished in its clone", || {
        let api = &api;
        let path = format!("/api/v1/agents/{id}/status");
        let cloned = dir.join("README.md").exists();
        async move {
            let r = api.get(&path).await;
            (cloned
                && ["completed", "failed", "stopped"]
                    .iter()
                    .any(|s| r.body["status"] == *s))
            .then_some(())
        }
    })
    .await;
    api.delete_task(&task).await;
    kandev_e2e::eventually(60, "the direct launch's clone removed", || {
        let gone = !dir.exists();
        async move { gone.then_some(()) }
    })
    .await;
    stack.stop().await;
}

/// `git <args>` in `dir`; its standard output.
fn git_in(dir: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Issue 40: an approval pushes exactly the work: not the agent's own state
/// in the workspace (the agent type's `state_paths`), not what the
/// repository's `.gitignore` ignores. After the approval the clone is gone,
/// and the task's changes are still the approved change, saying where it
/// went.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_pushes_exactly_the_work_and_its_change_stays_readable() {
    let stack = Stack::start("exact", Options::default()).await;
    let api = stack.admin().await;
    // A remote whose base ignores logs and build output.
    let source = stack.git_repo("exact-src");
    let source = std::path::PathBuf::from(source.trim_start_matches("file://"));
    std::fs::write(source.join(".gitignore"), "*.log\nbuild/\n").unwrap();
    git_in(&source, &["add", ".gitignore"]);
    git_in(
        &source,
        &[
            "-c",
            "user.name=e2e",
            "-c",
            "user.email=e2e@example.com",
            "commit",
            "-q",
            "-m",
            "ignore",
        ],
    );
    let bare = source.with_file_name("exact.git");
    git_in(
        source.parent().unwrap(),
        &[
            "clone",
            "-q",
            "--bare",
            source.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    let remote = format!("file://{}", bare.display());

    // A mock agent that keeps its sessions in the workspace, declared as
    // its state.
    let made = api
        .agent_type(mock_type(
            "mock-stateful",
            "Mock agent (state in the workspace)",
            json!({"optional_env": ["KANDEV_MOCK_STATE_DIR"], "state_paths": [".kandev-mock/"]}),
        ))
        .await;
    assert_eq!(made["state_paths"], json!([".kandev-mock/"]));
    api.set_secret("KANDEV_MOCK_STATE_DIR", ".kandev-mock")
        .await;

    let board = api.board("exact").await;
    let fields = merged(
        code_task("Exact work", &remote),
        json!({"agent_type": "mock-stateful"}),
    );
    let task = api.task(&board, fields).await;
    api.wait_state(&task, &["COMPLETED"], 180).await;
    let workspace = stack.workspace(&task);
    assert!(workspace.join(".kandev-mock/sessions").is_dir());
    // What an agent (or its build) leaves that the repository ignores.
    std::fs::write(workspace.join("debug.log"), "noise\n").unwrap();
    std::fs::create_dir_all(workspace.join("build")).unwrap();
    std::fs::write(workspace.join("build/out.bin"), "binary\n").unwrap();

    let files = |c: &Value| -> Vec<String> {
        c["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["path"].as_str().unwrap().to_string())
            .collect()
    };
    let before = api.get(&format!("/api/v1/tasks/{task}/changes")).await;
    assert_eq!(before.status, 200, "{}", before.body);
    assert_eq!(files(&before.body), ["README.md"], "{}", before.body);
    assert_eq!(before.body["delivered"], Value::Null, "{}", before.body);
    assert_eq!(before.body["clone_removed"], false, "{}", before.body);

    let delivery = &api.approve(&task, Some("Exact work")).await;
    let branch = delivery["branch"].as_str().unwrap().to_string();
    let commit = delivery["commit"].as_str().unwrap().to_string();

    // The pushed branch, cloned: the base's files and the agent's edit.
    let checkout = source.with_file_name("exact-checkout");
    git_in(
        source.parent().unwrap(),
        &[
            "clone",
            "-q",
            "-b",
            &branch,
            bare.to_str().unwrap(),
            checkout.to_str().unwrap(),
        ],
    );
    assert_eq!(git_in(&checkout, &["ls-files"]), ".gitignore\nREADME.md\n");
    assert_eq!(git_in(&checkout, &["rev-parse", "HEAD"]).trim(), commit);
    assert!(
        std::fs::read_to_string(checkout.join("README.md"))
            .unwrap()
            .contains("Edited by kandev-mock-agent (turn 1).")
    );

    // The clone is gone; the approved change is still there to read.
    assert!(!workspace.exists());
    let after = api.get(&format!("/api/v1/tasks/{task}/changes")).await;
    assert_eq!(after.status, 200, "{}", after.body);
    let c = &after.body;
    assert_eq!(files(c), ["README.md"], "{c}");
    assert_eq!(c["clone_removed"], true, "{c}");
    assert_eq!(c["workspace_path"], "", "{c}");
    assert_eq!(c["head_commit"], commit.as_str(), "{c}");
    assert_eq!(
        c["delivered"],
        json!({"branch": branch, "commit": commit, "pushed_to": remote}),
        "{c}"
    );
    let diff = api
        .get(&format!("/api/v1/tasks/{task}/changes/diff?path=README.md"))
        .await;
    assert_eq!(diff.status, 200, "{}", diff.body);
    assert!(
        diff.body["diff"]
            .as_str()
            .unwrap()
            .contains("+Edited by kandev-mock-agent (turn 1)."),
        "{}",
        diff.body
    );
    let ignored = api
        .get(&format!("/api/v1/tasks/{task}/changes/diff?path=debug.log"))
        .await;
    assert_eq!(ignored.status, 404, "{}", ignored.body);
    // Nothing is left to deliver again.
    let again = api.review(&task, json!({"action": "approve"})).await;
    assert_eq!(again.status, 404, "{}", again.body);
    stack.stop().await;
}
