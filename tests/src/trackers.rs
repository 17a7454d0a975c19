//! Boards linked to an issue tracker, over either fake forge of
//! `kandev_testkit` ([`FakeGithub`], [`FakeGitlab`]): [`Tracked::start`]
//! makes the stack, the forge's repository with a labelled issue and a
//! board linked to it, and the checks every tracker scenario makes of the
//! labelled issue's task and its approval.

use kandev_testkit::{fake_github::FakeGithub, fake_gitlab::FakeGitlab};
use serde_json::{Value, json};

use crate::{Api, Options, Resp, Stack, Svc, eventually};

/// A fake forge as a tracker test drives it.
pub trait Forge {
    /// The tracker's `kind` (`github`, `gitlab`).
    const KIND: &'static str;
    /// The `KANDEV_FORGES` value pointing every `file:///` repository at
    /// the fake, with the token it lets in.
    fn forges(&self) -> String;
    /// An open issue of `repo`, as the forge lists it.
    fn issue(repo: &str, number: i64, title: &str, body: &str, labels: &[&str]) -> Value;
    /// Serves `repo` with `issues`.
    fn serve_issues(&self, repo: &str, issues: Vec<Value>);
    /// The descriptions of the pull (merge) requests opened so far.
    fn requests(&self) -> Vec<String>;
    /// (repository, issue number, text) of each comment (note) on an issue.
    fn comments(&self) -> Vec<(String, i64, String)>;
}

/// The token [`FakeGithub`] is told about in `KANDEV_FORGES`.
pub const GITHUB_TOKEN: &str = "t0ken";

impl Forge for FakeGithub {
    const KIND: &'static str = "github";

    fn forges(&self) -> String {
        self.forges_setting(GITHUB_TOKEN)
    }

    fn issue(repo: &str, number: i64, title: &str, body: &str, labels: &[&str]) -> Value {
        kandev_testkit::fake_github::issue(repo, number, title, body, labels)
    }

    fn serve_issues(&self, repo: &str, issues: Vec<Value>) {
        self.serve(repo, issues);
    }

    fn requests(&self) -> Vec<String> {
        let pulls = &self.forge().pulls;
        pulls.iter().map(|p| description(&p.1["body"])).collect()
    }

    fn comments(&self) -> Vec<(String, i64, String)> {
        self.forge().comments.clone()
    }
}

impl Forge for FakeGitlab {
    const KIND: &'static str = "gitlab";

    fn forges(&self) -> String {
        format!(
            "[{{repository_prefix = \"file:///\", kind = \"gitlab\", api_url = \"{}\", token = \"{}\"}}]",
            self.api_url(),
            self.token
        )
    }

    fn issue(repo: &str, number: i64, title: &str, body: &str, labels: &[&str]) -> Value {
        kandev_testkit::fake_gitlab::issue(repo, number, title, body, labels)
    }

    fn serve_issues(&self, repo: &str, issues: Vec<Value>) {
        self.serve(repo, issues);
    }

    fn requests(&self) -> Vec<String> {
        let gitlab = self.state.lock().unwrap();
        let opened = &gitlab.merge_requests;
        opened
            .iter()
            .map(|m| description(&m.1["description"]))
            .collect()
    }

    fn comments(&self) -> Vec<(String, i64, String)> {
        self.state.lock().unwrap().notes.clone()
    }
}

/// A request's description, which must be a string.
fn description(text: &Value) -> String {
    text.as_str().expect("a description").to_string()
}

/// A stack whose orchestrator reads `forge` (reconciling every second,
/// finishing runs in REVIEW), a bare repository the forge serves with
/// issue 1 labelled `kandev` and issue 2 not, and a board linked to it.
pub struct Tracked<F> {
    pub stack: Stack,
    pub api: Api,
    pub forge: F,
    /// The repository's `file://` URL.
    pub url: String,
    /// Its name on the forge.
    pub repo: String,
    pub board: String,
    /// The link's answer (asserted 200).
    pub linked: Value,
}

impl<F: Forge> Tracked<F> {
    /// Starts it all for the test `test`; the link carries `secret` as its
    /// webhook secret, which the answer must not show.
    pub async fn start(test: &str, forge: F, options: Options, secret: &str) -> Tracked<F> {
        let options = options
            .with(Svc::Orchestrator, "KANDEV_COMPLETE_TO_REVIEW", "true")
            .with(Svc::Orchestrator, "KANDEV_FORGES", forge.forges())
            .with(Svc::Orchestrator, "KANDEV_TRACKER_RECONCILE_SECS", "1");
        let (stack, api, board) = Stack::start_with_board(test, options, test).await;
        let bare = stack.bare_repo(test);
        let (url, repo) = (bare.url, bare.repo);
        let issues = vec![
            F::issue(
                &repo,
                1,
                "Improve the readme",
                "scenario: code",
                &["kandev"],
            ),
            F::issue(&repo, 2, "Not for Kandev", "scenario: code", &["bug"]),
        ];
        forge.serve_issues(&repo, issues);
        let linked = api
            .link_tracker(
                &board,
                json!({"kind": F::KIND, "repository_url": url, "label": "kandev",
                       "agent_type": "mock-agent", "webhook_secret": secret}),
            )
            .await;
        assert_eq!(linked.status, 200, "{}", linked.body);
        assert_eq!(linked.body["repository"], repo.as_str());
        assert!(!linked.body.to_string().contains(secret), "{}", linked.body);
        let linked = linked.body;
        Tracked {
            stack,
            api,
            forge,
            url,
            repo,
            board,
            linked,
        }
    }

    /// The task the reconcile made of issue 1, once it is in REVIEW; the
    /// task as first seen. Issue 2 made none.
    pub async fn labelled_task_in_review(&self) -> Value {
        let task = task_of_issue(&self.api, &self.board, 1).await;
        assert_eq!(task["title"], "Improve the readme");
        let id = task["id"].as_str().unwrap();
        self.api.wait_state(id, &["REVIEW"], 180).await;
        assert_eq!(tasks(&self.api, &self.board).await.len(), 1);
        task
    }

    /// Approves `task`: one pull (merge) request that closes issue 1, and
    /// one comment on the issue with its link; the approval's `delivery`.
    pub async fn approve_closes_the_issue(&self, task: &str) -> Value {
        let delivery = self.api.approve(task, None).await;
        let url = delivery["pull_request_url"].as_str().unwrap();
        let requests = self.forge.requests();
        assert_eq!(requests.len(), 1, "{requests:?}");
        assert!(requests[0].contains("Closes #1"), "{}", requests[0]);
        let comments = self.forge.comments();
        assert_eq!(comments.len(), 1, "{comments:?}");
        assert_eq!(
            (comments[0].0.as_str(), comments[0].1),
            (self.repo.as_str(), 1)
        );
        assert!(comments[0].2.contains(url), "{comments:?}");
        delivery
    }

    /// Asserts the gateway and the orchestrator logged none of `secrets`.
    pub fn assert_not_logged(&self, secrets: &[&str]) {
        for svc in [Svc::Gateway, Svc::Orchestrator] {
            let log = self.stack.log(svc);
            for secret in secrets {
                assert!(!log.contains(secret), "{svc:?} logged {secret}");
            }
        }
    }
}

impl Api {
    /// `POST /boards/{board}/tracker`: links the board to a tracker.
    pub async fn link_tracker(&self, board: &str, body: Value) -> Resp {
        self.post(&format!("/api/v1/boards/{board}/tracker"), body)
            .await
    }

    /// `GET /boards/{board}/tracker`: the board's link.
    pub async fn tracker(&self, board: &str) -> Resp {
        self.get(&format!("/api/v1/boards/{board}/tracker")).await
    }
}

/// The board's tasks.
pub async fn tasks(api: &Api, board: &str) -> Vec<Value> {
    let r = api.get(&format!("/api/v1/boards/{board}/tasks")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["tasks"].as_array().cloned().unwrap_or_default()
}

/// The task made of issue `number`, once there is one.
pub async fn task_of_issue(api: &Api, board: &str, number: i64) -> Value {
    eventually(60, "the issue's task", || async {
        tasks(api, board)
            .await
            .into_iter()
            .find(|t| t["metadata"]["tracker"]["issue"] == number)
    })
    .await
}
