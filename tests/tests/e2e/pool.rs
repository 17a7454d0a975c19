//! Three agent managers in a pool, two of them on Docker engines of their
//! own: runs are placed within each manager's capacity and spread across
//! them; each task's changes are reviewed on the manager that ran it; a manager SIGKILLed together with its engine mid-run loses its
//! runs to the others within the grace, and their feeds stay exact; back,
//! it leaves no orphan container.

use std::{cell::RefCell, collections::BTreeSet, time::Duration};

use kandev_e2e::{
    Feed, Options, Stack, Svc, assert_every_chunk_once, chunk_text, eventually, instances, merged,
    mock_task, on_engine, own_engine, replay, serde_json::json,
};
use kandev_testkit::OwnDocker;

const CAPACITY: usize = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_spread_over_a_pool_and_move_off_a_manager_that_dies() {
    let options = Options {
        max_concurrent: 6,
        ..Options::default()
    }
    .with(Svc::Orchestrator, "KANDEV_MANAGER_GRACE_MS", "3000")
    .with(
        Svc::AgentManager,
        "KANDEV_MAX_INSTANCES",
        CAPACITY.to_string(),
    )
    .with(Svc::AgentManager, "KANDEV_ANNOUNCE_MS", "300");
    let mut stack = Stack::start("pool", options).await;
    let (b_engine, c_engine) = (own_engine().await, own_engine().await);
    let b_host = b_engine.lock().unwrap().host();
    let c_host = c_engine.lock().unwrap().host();
    let a_id = stack.manager_id().to_string();
    let (b_id, c_id) = (format!("{a_id}-b"), format!("{a_id}-c"));
    let root = |name: &str| {
        let dir = stack.workspace("x").parent().unwrap().with_file_name(name);
        std::fs::create_dir_all(&dir).unwrap();
        dir.display().to_string()
    };
    let roots = [root("workspaces-b"), root("workspaces-c")];
    let mut added = Vec::new();
    for ((id, host), dir) in [(&b_id, &b_host), (&c_id, &c_host)].into_iter().zip(roots) {
        let env = [
            ("KANDEV_MANAGER_ID", id.clone()),
            ("KANDEV_DOCKER_HOST", host.clone()),
            ("KANDEV_WORKSPACES_ROOT", dir),
        ];
        added.push(stack.add_replica(Svc::AgentManager, &env).await);
    }
    let (b, c) = (added[0], added[1]);
    eventually(30, "the orchestrator hears the three managers", || async {
        (stack
            .log(Svc::Orchestrator)
            .matches("agent manager joined the pool")
            .count()
            == 3)
            .then_some(())
    })
    .await;
    let hosts = [
        (a_id.clone(), None),
        (b_id.clone(), Some(b_host.clone())),
        (c_id.clone(), Some(c_host.clone())),
    ];

    // Nine runs, six at a time, at most two per manager.
    let api = stack.admin().await;
    let board = api.board("pool").await;
    let tasks = api
        .mock_tasks(&board, 9, "spread", "scenario: slow 15 100")
        .await;
    let used = RefCell::new(BTreeSet::new());
    api.wait_completed(&board, tasks.len(), 300, || async {
        for (id, host) in &hosts {
            let running = stack.containers_of(id, host.as_deref(), true).await.len();
            assert!(running <= CAPACITY, "{running} runs at once on {id}");
            if running > 0 {
                used.borrow_mut().insert(id.clone());
            }
        }
    })
    .await;
    let used = used.into_inner();
    assert!(used.len() >= 2, "runs were spread: {used:?}");
    for task in &tasks {
        let e = api.execution(task).await;
        assert_eq!(e.body["attempts"], 1, "{}", e.body);
        assert_eq!(instances(&replay(&api, task).await).len(), 1, "ran once");
    }

    // Six runs that change a repository, all at once: most land on B or
    // C, whose clones only they have; a review through the gateway (which
    // is configured with A) reaches the manager that ran each.
    let repo = stack.git_repo("pool");
    let mut coded = Vec::new();
    for i in 0..6 {
        let fields = mock_task(&format!("code {i}"), "scenario: code");
        let fields = merged(fields, json!({"repository_url": repo}));
        coded.push(api.task(&board, fields).await);
    }
    for task in &coded {
        api.wait_state(task, &["COMPLETED"], 180).await;
        let changes = api.get(&format!("/api/v1/tasks/{task}/changes")).await;
        assert_eq!(changes.status, 200, "{task}: {}", changes.body);
        let files = changes.body["files"].as_array().expect("files");
        assert!(
            files.iter().any(|f| f["path"] == "README.md"),
            "{task}: {}",
            changes.body
        );
        let diff = api
            .get(&format!("/api/v1/tasks/{task}/changes/diff?path=README.md"))
            .await;
        assert_eq!(diff.status, 200, "{task}: {}", diff.body);
    }

    // Three long runs, spread least loaded first; then a manager dies with
    // its engine.
    let long = api
        .mock_tasks(&board, 3, "long", "scenario: slow 40 100")
        .await;
    let mut feeds = Vec::new();
    for task in &long {
        let mut feed = Feed::open(&api, task).await;
        feed.wait_for_chunk(120, "chunk 3/40").await;
        feeds.push(feed);
    }
    // The victim: a manager on an engine of its own with a long run.
    let mut victim = None;
    for (replica, id, host, engine) in [
        (b, &b_id, &b_host, &b_engine),
        (c, &c_id, &c_host, &c_engine),
    ] {
        let running = stack.containers_of(id, Some(host), true).await.len();
        if running > 0 {
            victim = Some((replica, id.clone(), host.clone(), engine.clone(), running));
            break;
        }
    }
    let (victim, victim_id, victim_host, victim_engine, victim_runs) =
        victim.expect("a long run on B or C");
    stack.kill_replica(Svc::AgentManager, victim);
    on_engine(&victim_engine, OwnDocker::kill).await;

    for task in &long {
        let done = api.wait_state(task, &["COMPLETED"], 240).await;
        assert_eq!(done["state"], "COMPLETED", "{done}");
    }
    let mut moved = 0;
    for mut feed in feeds {
        // The helper checks every frame's seq: no gap, no duplicate.
        feed.drain(Duration::from_millis(800)).await;
        let task = feed.frames[0]["task_id"].as_str().unwrap().to_string();
        let ran = instances(&feed.frames);
        assert!(
            chunk_text(&feed.frames).contains("chunk 40/40"),
            "{task} ran to its end"
        );
        if ran.len() == 2 {
            moved += 1;
            // The second run is whole, after whatever the first sent.
            let last_of_first = feed
                .frames
                .iter()
                .rposition(|f| f["instance_id"] == feed.frames[0]["instance_id"])
                .unwrap();
            assert_every_chunk_once(&feed.frames[last_of_first + 1..], 40);
            let e = api.execution(&task).await;
            assert_eq!(
                e.body["attempts"], 1,
                "a move is not an attempt: {}",
                e.body
            );
        } else {
            assert_eq!(ran.len(), 1, "{task}: {ran:?}");
        }
        let seen = feed.frames.len();
        feed.close().await;
        assert_eq!(
            replay(&api, &task).await.len(),
            seen,
            "live and stored differ"
        );
    }
    assert_eq!(moved, victim_runs, "the runs on {victim_id} moved");

    // It comes back with its engine: nothing of its old runs is left.
    on_engine(&victim_engine, OwnDocker::start_again).await;
    stack.spawn_replica(Svc::AgentManager, victim).await;
    stack
        .wait_log(Svc::Orchestrator, 0, "agent manager is back", 30)
        .await;
    eventually(30, "it has no container left", || async {
        stack
            .containers_of(&victim_id, Some(&victim_host), false)
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    for (id, host) in &hosts {
        assert!(
            stack
                .containers_of(id, host.as_deref(), false)
                .await
                .is_empty(),
            "{id} left a container"
        );
    }
    stack.stop().await;
    tokio::task::spawn_blocking(move || drop((b_engine, c_engine)))
        .await
        .unwrap();
}
