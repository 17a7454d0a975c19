//! The storage contract: what every [`AgentStore`] does, checked against
//! each database. Each check is one function over two stores of two
//! managers sharing one database; `contract!` runs it on Postgres (a fresh
//! database) and on SQLite (a fresh file).

use std::collections::HashSet;

use chrono::{SubsecRound, Utc};
use kandev_agent_manager::{
    AgentError, Settings,
    domain::{AgentType, InstanceStatus, LogLine},
    profiles::{AgentProfile, McpServerSpec, McpTransport, ProfileSpec},
    startup::open_store,
    store::{Exchange, LaunchFields, Outcome, Position, Store},
};
use kandev_events::agent::OutputCursor;
use kandev_testkit::TestDb;
use serde_json::{Map, Value, json};
use uuid::Uuid;

/// Two managers' stores on one fresh database, and what removes it.
struct Backend {
    a: Store,
    b: Store,
    db: Option<TestDb>,
    _dir: Option<tempfile::TempDir>,
}

impl Backend {
    async fn open(database_url: &str, manager_id: &str) -> Store {
        let settings = Settings {
            common: kandev_common::config::ServiceSettings {
                database_url: database_url.into(),
                ..Settings::default().common
            },
            manager_id: manager_id.into(),
            ..Settings::default()
        };
        open_store(&settings).await.expect("the database opens")
    }

    async fn on(url: String, db: Option<TestDb>, dir: Option<tempfile::TempDir>) -> Backend {
        Backend {
            a: Self::open(&url, "manager-a").await,
            // The second opens a migrated database: migrating again is a no-op.
            b: Self::open(&url, "manager-b").await,
            db,
            _dir: dir,
        }
    }

    async fn postgres() -> Backend {
        let db = TestDb::create().await;
        Self::on(db.url.clone(), Some(db), None).await
    }

    async fn sqlite() -> Backend {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = format!("sqlite://{}", dir.path().join("agents.db").display());
        Self::on(url, None, Some(dir)).await
    }

    async fn remove(self) {
        self.a.close().await;
        self.b.close().await;
        if let Some(db) = self.db {
            db.drop_db().await;
        }
    }
}

/// Runs each named check against both databases.
macro_rules! contract {
    ($($check:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test]
                async fn $check() {
                    let backend = super::Backend::postgres().await;
                    super::$check(&backend.a, &backend.b).await;
                    backend.remove().await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test]
                async fn $check() {
                    let backend = super::Backend::sqlite().await;
                    super::$check(&backend.a, &backend.b).await;
                    backend.remove().await;
                }
            )*
        }
    };
}

contract!(
    the_registry_is_seeded_and_upserted,
    instances_belong_to_their_manager,
    a_turn_runs_and_ends_once,
    progress_never_goes_back,
    logs_keep_the_newest_lines,
    secrets_are_kept_per_user_within_a_limit,
    real_agents_keep_their_home_in_a_volume,
    a_tasks_conversation_is_kept_bounded,
    profiles_are_kept_per_owner_and_shared,
);

/// The seeded registry, the same on both databases: what a fresh
/// installation offers, whichever database it is on.
#[tokio::test]
async fn both_databases_seed_the_same_registry() {
    let (pg, lite) = (Backend::postgres().await, Backend::sqlite().await);
    let seeded = pg.a.list_types(true).await.unwrap();
    assert_eq!(lite.a.list_types(true).await.unwrap(), seeded);
    let ids: Vec<_> = seeded.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "auggie-cli",
            "augment-agent",
            "claude-code",
            "codex",
            "gemini",
            "mock-agent",
            "seed-agent"
        ]
    );
    pg.remove().await;
    lite.remove().await;
}

fn launch<'a>(metadata: &'a Map<String, Value>, scope: &'a str) -> LaunchFields<'a> {
    LaunchFields {
        priority: 3,
        metadata,
        home_scope: scope,
    }
}

async fn new_instance(store: &Store, task_id: Uuid) -> Uuid {
    let metadata = Map::new();
    let id = Uuid::now_v7();
    store
        .create_instance(id, task_id, "mock-agent", &launch(&metadata, ""))
        .await
        .unwrap();
    id
}

fn is_not_found<T: std::fmt::Debug>(result: Result<T, AgentError>) -> bool {
    matches!(result, Err(AgentError::NotFound(_)))
}

async fn the_registry_is_seeded_and_upserted(a: &Store, b: &Store) {
    let mock = a.get_type("mock-agent").await.unwrap();
    assert_eq!(mock.image, "kandev/mock-agent:latest");
    assert_eq!(mock.capabilities, ["acp", "fs"]);
    // The demo: listed in the picker.
    assert!(!mock.internal && mock.enabled && !mock.host_credentials);
    assert_eq!(mock.name, "Mock agent (demo)");
    assert!(a.get_type("seed-agent").await.unwrap().internal);
    assert!(is_not_found(a.get_type("nope").await));
    // An id no type can have is not found, not a database error.
    assert!(is_not_found(a.get_type("a\0b").await));
    assert!(is_not_found(a.get_type("").await));

    let custom = AgentType {
        id: "custom".into(),
        name: "Custom".into(),
        command: vec!["run".into(), "--acp".into()],
        required_env: vec!["TOKEN".into()],
        enabled: false,
        host_credentials: true,
        ..mock.clone()
    };
    assert_eq!(a.upsert_type(&custom).await.unwrap(), custom);
    // The registry is shared: the other manager sees it.
    assert_eq!(b.get_type("custom").await.unwrap(), custom);
    let enabled = a.list_types(false).await.unwrap();
    assert!(
        !enabled.iter().any(|t| t.id == "custom"),
        "disabled is hidden"
    );
    let all = a.list_types(true).await.unwrap();
    assert!(all.iter().any(|t| t.id == "custom"));
    assert!(all.windows(2).all(|w| w[0].id < w[1].id), "ordered by id");

    let changed = AgentType {
        enabled: true,
        memory_mb: 512,
        optional_env: vec![],
        ..custom
    };
    assert_eq!(b.upsert_type(&changed).await.unwrap(), changed);
    assert_eq!(a.get_type("custom").await.unwrap(), changed);
}

async fn instances_belong_to_their_manager(a: &Store, b: &Store) {
    let task = Uuid::now_v7();
    let metadata: Map<String, Value> = json!({"k": [1, 2]}).as_object().unwrap().clone();
    let id = Uuid::now_v7();
    let created = a
        .create_instance(id, task, "mock-agent", &launch(&metadata, "alice"))
        .await
        .unwrap();
    assert_eq!(created.status, InstanceStatus::Pending);
    assert_eq!(
        (created.priority, created.home_scope.as_str()),
        (3, "alice")
    );
    assert_eq!(created.metadata, metadata);
    assert_eq!((created.turns, created.last_seq), (0, 0));
    assert_eq!(created.started_at, None);
    assert_eq!(a.get_instance(id).await.unwrap(), created);
    let second = new_instance(a, task).await;
    let elsewhere = new_instance(a, Uuid::now_v7()).await;
    let theirs = new_instance(b, task).await;

    let listed: Vec<_> = a
        .list_instances(Some(task))
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(listed, [id, second], "its own, oldest first");
    assert_eq!(a.list_instances(None).await.unwrap().len(), 3);
    assert_eq!(a.count_active().await.unwrap(), 3);
    assert_eq!(b.count_active().await.unwrap(), 1);
    let active: HashSet<_> = a
        .active_instances()
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(active, HashSet::from([id, second, elsewhere]));
    assert!(is_not_found(a.get_instance(theirs).await));
    assert!(is_not_found(b.get_instance(id).await));
    assert!(is_not_found(a.get_instance(Uuid::now_v7()).await));
}

async fn a_turn_runs_and_ends_once(a: &Store, _b: &Store) {
    let id = new_instance(a, Uuid::now_v7()).await;
    a.set_workspace(id, "/var/kandev/ws/1", true).await.unwrap();
    let turn = a.begin_turn(id).await.unwrap();
    assert_eq!((turn.status, turn.turns), (InstanceStatus::Starting, 1));
    let started = turn.started_at.expect("a turn stamps its start");
    a.set_container(id, "c0ffee").await.unwrap();
    a.set_running(id, "session-1").await.unwrap();
    let running = a.get_instance(id).await.unwrap();
    assert_eq!(running.status, InstanceStatus::Running);
    assert_eq!(
        (
            running.container_id.as_str(),
            running.acp_session_id.as_str(),
            running.workspace_path.as_str(),
            running.workspace_owned
        ),
        ("c0ffee", "session-1", "/var/kandev/ws/1", true)
    );

    let outcome = Outcome {
        error: "agent said no".into(),
        exit_code: Some(3),
        stop_reason: "refusal".into(),
    };
    assert!(
        a.finish(id, InstanceStatus::Failed, &outcome)
            .await
            .unwrap()
    );
    assert!(
        !a.finish(id, InstanceStatus::Completed, &Outcome::default())
            .await
            .unwrap(),
        "an ended instance ends once"
    );
    let ended = a.get_instance(id).await.unwrap();
    assert_eq!(ended.status, InstanceStatus::Failed);
    assert_eq!(
        (
            ended.error.as_str(),
            ended.exit_code,
            ended.stop_reason.as_str()
        ),
        ("agent said no", Some(3), "refusal")
    );
    assert!(ended.finished_at.is_some());
    assert_eq!(a.count_active().await.unwrap(), 0);

    // A follow-up turn clears the outcome and keeps the first start.
    let again = a.begin_turn(id).await.unwrap();
    assert_eq!((again.status, again.turns), (InstanceStatus::Starting, 2));
    assert_eq!((again.error.as_str(), again.exit_code), ("", None));
    assert_eq!(again.finished_at, None);
    assert_eq!(again.started_at, Some(started));
}

async fn progress_never_goes_back(a: &Store, _b: &Store) {
    let id = new_instance(a, Uuid::now_v7()).await;
    let other = new_instance(a, Uuid::now_v7()).await;
    let at = |stdout_lines, stderr_lines| OutputCursor {
        stdout_lines,
        stderr_lines,
    };
    let position = |id, last_seq, progress, cursor| Position {
        id,
        last_seq,
        progress,
        cursor,
    };
    // Several instances in one call, each to its own position.
    a.save_progress(&[
        position(id, 10, 0.5, at(12, 1)),
        position(other, 3, 0.25, at(4, 0)),
    ])
    .await
    .unwrap();
    let stored = a.get_instance(other).await.unwrap();
    assert_eq!((stored.last_seq, stored.progress), (3, 0.25));
    assert_eq!(stored.cursor, at(4, 0));
    let sync = json!({"id": Uuid::now_v7(), "type": "agent.sync"});
    a.save_sync(id, 11, 0.6, at(13, 1), &sync).await.unwrap();
    // Older positions (a late writer) change nothing; the others in the
    // same call are stored.
    a.save_progress(&[
        position(id, 9, 0.9, at(1, 1)),
        position(other, 5, 0.5, at(6, 1)),
    ])
    .await
    .unwrap();
    a.save_sync(id, 5, 0.9, at(1, 1), &json!({})).await.unwrap();
    let now = a.get_instance(id).await.unwrap();
    assert_eq!((now.last_seq, now.progress), (11, 0.6));
    assert_eq!(now.cursor, at(13, 1));
    assert_eq!(now.sync_event, Some(sync));
    assert_eq!(a.get_instance(other).await.unwrap().last_seq, 5);
    // Nothing to store is no statement and no error.
    a.save_progress(&[]).await.unwrap();
    // A new turn starts its output over.
    let turn = a.begin_turn(id).await.unwrap();
    assert_eq!(
        (turn.cursor, turn.sync_event, turn.last_seq),
        (at(0, 0), None, 11)
    );
}

async fn logs_keep_the_newest_lines(a: &Store, _b: &Store) {
    let id = new_instance(a, Uuid::now_v7()).await;
    let other = new_instance(a, Uuid::now_v7()).await;
    let line = |n: usize| LogLine {
        at: Utc::now(),
        stream: if n.is_multiple_of(2) {
            "stderr"
        } else {
            "system"
        }
        .into(),
        line: format!("line {n}"),
    };
    a.append_logs(other, &[line(0)], 10).await.unwrap();
    a.append_logs(id, &[], 10).await.unwrap();
    a.append_logs(id, &(0..4).map(line).collect::<Vec<_>>(), 5)
        .await
        .unwrap();
    a.append_logs(id, &(4..8).map(line).collect::<Vec<_>>(), 5)
        .await
        .unwrap();
    let texts = |lines: Vec<LogLine>| lines.into_iter().map(|l| l.line).collect::<Vec<_>>();
    assert_eq!(
        texts(a.tail_logs(id, 100).await.unwrap()),
        ["line 3", "line 4", "line 5", "line 6", "line 7"],
        "the newest 5, oldest first"
    );
    let tail = a.tail_logs(id, 2).await.unwrap();
    assert_eq!(tail[1].stream, "system");
    assert_eq!(texts(tail), ["line 6", "line 7"]);
    assert_eq!(texts(a.tail_logs(other, 10).await.unwrap()), ["line 0"]);
}

async fn secrets_are_kept_per_user_within_a_limit(a: &Store, b: &Store) {
    let first = a
        .put_secret("alice", "GITHUB_TOKEN", b"nonce-1", b"sealed-1", 2)
        .await
        .unwrap();
    assert_eq!(first.name, "GITHUB_TOKEN");
    a.put_secret("alice", "API_KEY", b"n2", b"s2", 2)
        .await
        .unwrap();
    let err = a
        .put_secret("alice", "THIRD", b"n3", b"s3", 2)
        .await
        .unwrap_err();
    assert!(matches!(err, AgentError::FailedPrecondition(_)), "{err}");
    // Replacing one is not one more; another user has a limit of its own.
    let replaced = a
        .put_secret("alice", "GITHUB_TOKEN", b"nonce-9", b"sealed-9", 2)
        .await
        .unwrap();
    assert!(replaced.updated_at >= first.updated_at);
    b.put_secret("bob", "GITHUB_TOKEN", b"nb", b"sb", 2)
        .await
        .unwrap();

    let names: Vec<_> = b
        .list_secrets("alice")
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["API_KEY", "GITHUB_TOKEN"], "shared, by name");
    assert_eq!(
        a.sealed_secrets("alice").await.unwrap(),
        [
            ("API_KEY".into(), b"n2".to_vec(), b"s2".to_vec()),
            (
                "GITHUB_TOKEN".into(),
                b"nonce-9".to_vec(),
                b"sealed-9".to_vec()
            ),
        ]
    );
    assert!(a.delete_secret("alice", "API_KEY").await.unwrap());
    assert!(!a.delete_secret("alice", "API_KEY").await.unwrap());
    assert_eq!(a.sealed_secrets("bob").await.unwrap().len(), 1);
}

/// Claude Code, Codex, Gemini and the mock agent keep their own session
/// stores in their home: by default it is a volume (per user and type), so
/// a follow-up in a new container can load the session; Augment keeps its
/// sessions directory as before. What an agent keeps in the workspace for
/// itself is declared as its state paths.
async fn real_agents_keep_their_home_in_a_volume(a: &Store, _b: &Store) {
    let state = |id: &'static str| async move { a.get_type(id).await.unwrap().state_paths };
    assert_eq!(state("claude-code").await, [".claude/settings.local.json"]);
    assert_eq!(state("mock-agent").await, [".kandev-mock/"]);
    for id in ["codex", "gemini", "seed-agent", "augment-agent"] {
        assert!(state(id).await.is_empty(), "{id}");
    }
    for id in ["claude-code", "codex", "gemini", "mock-agent"] {
        assert_eq!(
            a.get_type(id).await.unwrap().home_volume,
            "/home/agent",
            "{id}"
        );
    }
    for id in ["augment-agent", "auggie-cli"] {
        assert_eq!(
            a.get_type(id).await.unwrap().home_volume,
            "/home/agent/.augment/sessions",
            "{id}"
        );
    }
    assert_eq!(a.get_type("seed-agent").await.unwrap().home_volume, "");
}

/// A task's exchanges are kept across its instances, oldest first, the
/// newest `keep` only; other tasks' are apart.
async fn a_tasks_conversation_is_kept_bounded(a: &Store, b: &Store) {
    let task = Uuid::now_v7();
    let (one, two) = (new_instance(a, task).await, new_instance(b, task).await);
    let other = Uuid::now_v7();
    let elsewhere = new_instance(a, other).await;
    let exchange = |n: usize| Exchange {
        prompt: format!("prompt {n} ✓"),
        reply: if n.is_multiple_of(2) {
            format!("reply {n}")
        } else {
            String::new()
        },
    };
    for n in 0..5 {
        let instance = if n < 3 { one } else { two };
        a.record_exchange(task, instance, &exchange(n), 4)
            .await
            .unwrap();
    }
    b.record_exchange(other, elsewhere, &exchange(9), 4)
        .await
        .unwrap();
    let kept = b.exchanges(task, 100).await.unwrap();
    assert_eq!(kept, (1..5).map(exchange).collect::<Vec<_>>());
    assert_eq!(
        a.exchanges(task, 2).await.unwrap(),
        [exchange(3), exchange(4)]
    );
    assert_eq!(a.exchanges(other, 10).await.unwrap(), [exchange(9)]);
    assert!(a.exchanges(Uuid::now_v7(), 10).await.unwrap().is_empty());
}

fn profile(owner: &str, agent_type: &str, name: &str) -> AgentProfile {
    let now = Utc::now().trunc_subsecs(6);
    AgentProfile {
        id: Uuid::now_v7(),
        owner: owner.into(),
        agent_type: agent_type.into(),
        name: name.into(),
        spec: ProfileSpec {
            model: "mock-smart".into(),
            mode: "plan".into(),
            instructions: "Be brief.".into(),
            env: [("GH".to_string(), "GITHUB_TOKEN".to_string())].into(),
            mcp_servers: vec![McpServerSpec {
                name: "docs".into(),
                transport: McpTransport::Http,
                command: String::new(),
                args: vec![],
                env: Default::default(),
                url: "https://mcp.example/docs".into(),
                headers: [("Authorization".to_string(), "DOCS_TOKEN".to_string())].into(),
            }],
        },
        created_at: now,
        updated_at: now,
    }
}

/// Profiles: a user's own and the shared ones are listed (by type,
/// shared first), another user's are not; the spec round-trips; a name is
/// unique per owner and type; a profile of an unknown type is refused.
async fn profiles_are_kept_per_owner_and_shared(a: &Store, b: &Store) {
    let mine = profile("alice", "mock-agent", "fast");
    let shared = profile("", "mock-agent", "team");
    let theirs = profile("bob", "mock-agent", "fast");
    let other_type = profile("alice", "codex", "fast");
    for p in [&mine, &shared, &theirs, &other_type] {
        a.put_profile(p).await.unwrap();
    }
    // The other manager on the database sees them: profiles are shared.
    assert_eq!(b.get_profile(mine.id).await.unwrap().as_ref(), Some(&mine));
    let names = |list: Vec<AgentProfile>| -> Vec<(String, String, String)> {
        list.into_iter()
            .map(|p| (p.agent_type, p.owner, p.name))
            .collect()
    };
    let alice = names(a.list_profiles("alice", None).await.unwrap());
    let expect = |v: &[(&str, &str, &str)]| -> Vec<(String, String, String)> {
        v.iter()
            .map(|(t, o, n)| (t.to_string(), o.to_string(), n.to_string()))
            .collect()
    };
    assert_eq!(
        alice,
        expect(&[
            ("codex", "alice", "fast"),
            ("mock-agent", "", "team"),
            ("mock-agent", "alice", "fast")
        ])
    );
    let bob = names(b.list_profiles("bob", Some("mock-agent")).await.unwrap());
    assert_eq!(
        bob,
        expect(&[("mock-agent", "", "team"), ("mock-agent", "bob", "fast")])
    );

    let mut renamed = mine.clone();
    renamed.name = "faster".into();
    renamed.spec.mcp_servers.clear();
    renamed.updated_at = Utc::now().trunc_subsecs(6);
    b.put_profile(&renamed).await.unwrap();
    assert_eq!(a.get_profile(mine.id).await.unwrap(), Some(renamed.clone()));

    let mut clash = profile("alice", "mock-agent", "faster");
    let err = a.put_profile(&clash).await.unwrap_err();
    assert!(
        matches!(&err, AgentError::InvalidArgument(m) if m.starts_with("name:")),
        "{err:?}"
    );
    clash.name = "team".into();
    a.put_profile(&clash).await.unwrap();
    let unknown = profile("alice", "no-such-type", "x");
    let err = a.put_profile(&unknown).await.unwrap_err();
    assert!(
        matches!(&err, AgentError::InvalidArgument(m) if m.starts_with("agent_type:")),
        "{err:?}"
    );

    assert!(a.delete_profile(mine.id).await.unwrap());
    assert!(!b.delete_profile(mine.id).await.unwrap());
    assert_eq!(a.get_profile(mine.id).await.unwrap(), None);
}
