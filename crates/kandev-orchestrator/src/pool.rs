//! The agent managers as a pool: each announces itself on NATS
//! (`managers.<id>`, see `kandev_events::managers`) and this keeps what it
//! heard. Runs are placed on a live manager with room and the agent type's
//! image, least loaded first; calls about an instance go to the manager
//! that has it. A manager not heard from for `grace` is gone: the engine
//! moves its runs elsewhere (`engine::failover`).
//!
//! Without any announcement (a manager older than the pool, or a NATS user
//! without the subject) the configured `agent_manager_url` serves alone,
//! as before.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use async_trait::async_trait;
use futures::StreamExt as _;
use kandev_common::{CancellationToken, service_auth::ServiceToken};
use kandev_events::managers::{MANAGERS_ALL, ManagerAnnouncement};
use kandev_proto::v1 as pb;
use tonic::{Code, Status};
use uuid::Uuid;

use crate::clients::{AgentControl, GrpcAgentControl};

/// How many announcement periods may be missed before a manager gets no
/// new run (it may still be slow rather than gone).
const MISSED_FOR_NO_PLACEMENT: u32 = 3;

/// A manager not heard from for this many graces is forgotten (a pool whose
/// managers come and go with new ids stays small); if it comes back it
/// joins again.
const FORGET_AFTER_GRACES: u32 = 20;

/// The instance and task routes kept; beyond, they are dropped and found
/// again by asking the managers.
const ROUTES_KEPT: usize = 100_000;

struct Member {
    announcement: ManagerAnnouncement,
    client: Arc<GrpcAgentControl>,
    heard: Instant,
    /// Runs placed on it since its last announcement.
    placed: u32,
}

impl Member {
    /// Heard lately, not leaving, with room for one more run.
    fn placeable(&self, now: Instant) -> bool {
        let period = Duration::from_millis(self.announcement.every_ms.max(1));
        !self.announcement.leaving
            && now.duration_since(self.heard) < period * MISSED_FOR_NO_PLACEMENT
            && self.announcement.has_room(self.placed)
    }

    fn has_image_of(&self, agent_type: &str) -> bool {
        self.announcement
            .agent_types
            .iter()
            .any(|t| t == agent_type)
    }
}

#[derive(Default)]
struct State {
    members: HashMap<String, Member>,
    /// Which manager has an instance (learnt at launch or by asking).
    instances: HashMap<Uuid, String>,
    /// Which manager ran a task last (its workspace is there).
    tasks: HashMap<Uuid, String>,
    /// Managers heard for the first time (or again after being gone) that
    /// the engine has not reconciled yet.
    to_reconcile: HashSet<String>,
}

/// The pool; it is the orchestrator's [`AgentControl`].
pub struct ManagerPool {
    state: Mutex<State>,
    /// The configured `agent_manager_url`, for when no manager announces.
    fallback: Arc<GrpcAgentControl>,
    token: ServiceToken,
    grace: Duration,
    started: Instant,
}

impl ManagerPool {
    pub fn new(fallback_url: &str, token: &ServiceToken, grace: Duration) -> Result<Self, String> {
        Ok(ManagerPool {
            state: Mutex::new(State::default()),
            fallback: Arc::new(GrpcAgentControl::lazy(fallback_url, token)?),
            token: token.clone(),
            grace,
            started: Instant::now(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        kandev_common::sync::lock(&self.state)
    }

    /// Follows the announcements until `stop` fires.
    pub async fn listen(self: Arc<Self>, client: async_nats::Client, stop: CancellationToken) {
        let mut subscription = loop {
            match client.subscribe(MANAGERS_ALL).await {
                Ok(s) => break s,
                Err(err) => {
                    tracing::warn!(%err, "cannot follow the agent managers' announcements yet");
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            }
        };
        loop {
            let message = tokio::select! {
                () = stop.cancelled() => return,
                m = subscription.next() => m,
            };
            let Some(message) = message else { return };
            match serde_json::from_slice::<ManagerAnnouncement>(&message.payload) {
                Ok(a) => self.heard(a),
                Err(err) => {
                    tracing::warn!(%err, subject = %message.subject, "malformed manager announcement")
                }
            }
        }
    }

    /// Records an announcement.
    pub fn heard(&self, announcement: ManagerAnnouncement) {
        let now = Instant::now();
        let mut state = self.lock();
        let id = announcement.id.clone();
        let previous = state.members.get(&id);
        let joined = previous.is_none();
        let back = previous.is_some_and(|m| now.duration_since(m.heard) >= self.grace);
        let same_url = previous
            .filter(|m| m.announcement.url == announcement.url)
            .map(|m| m.client.clone());
        let client = match same_url {
            Some(client) => client,
            None => match GrpcAgentControl::lazy(&announcement.url, &self.token) {
                Ok(c) => Arc::new(c),
                Err(err) => {
                    tracing::warn!(manager = %id, %err, "the manager's URL is not usable");
                    return;
                }
            },
        };
        if joined {
            tracing::info!(manager = %id, url = %announcement.url, capacity = announcement.capacity, "agent manager joined the pool");
        } else if back {
            tracing::info!(manager = %id, "agent manager is back");
        }
        if joined || back {
            state.to_reconcile.insert(id.clone());
        }
        if announcement.leaving {
            tracing::info!(manager = %id, "agent manager is leaving the pool");
        }
        metrics::gauge!(crate::metric_names::POOL_ACTIVE_INSTANCES, "manager" => id.clone())
            .set(f64::from(announcement.active));
        let forget = self.grace * FORGET_AFTER_GRACES;
        state.members.retain(|other, m| {
            let keep = now.duration_since(m.heard) < forget;
            if !keep {
                tracing::info!(manager = %other, "forgetting an agent manager not heard from for long");
            }
            keep
        });
        state.members.insert(
            id,
            Member {
                announcement,
                client,
                heard: now,
                placed: 0,
            },
        );
    }

    /// Whether any manager ever announced itself to this pool.
    fn pooled(&self) -> bool {
        !self.lock().members.is_empty()
    }

    /// The managers to try for a new run of `agent_type`: those with room,
    /// the ones whose engine has its image first (another pulls it, or
    /// refuses with the reason), least loaded first.
    fn candidates(&self, agent_type: &str) -> Vec<(String, Arc<GrpcAgentControl>)> {
        let now = Instant::now();
        let state = self.lock();
        let mut list: Vec<(&String, &Member)> = state
            .members
            .iter()
            .filter(|(_, m)| m.placeable(now))
            .collect();
        list.sort_by(|(a_id, a), (b_id, b)| {
            b.has_image_of(agent_type)
                .cmp(&a.has_image_of(agent_type))
                .then_with(|| {
                    a.announcement
                        .load(a.placed)
                        .total_cmp(&b.announcement.load(b.placed))
                })
                .then_with(|| a_id.cmp(b_id))
        });
        list.into_iter()
            .map(|(id, m)| (id.clone(), m.client.clone()))
            .collect()
    }

    /// The clients of every manager heard within the grace (the fallback
    /// when none announced).
    fn live(&self) -> Vec<(String, Arc<GrpcAgentControl>)> {
        let now = Instant::now();
        let state = self.lock();
        if state.members.is_empty() {
            return vec![(String::new(), self.fallback.clone())];
        }
        state
            .members
            .iter()
            .filter(|(_, m)| now.duration_since(m.heard) < self.grace)
            .map(|(id, m)| (id.clone(), m.client.clone()))
            .collect()
    }

    fn client_of(&self, manager: &str) -> Option<Arc<GrpcAgentControl>> {
        self.lock().members.get(manager).map(|m| m.client.clone())
    }

    /// Runs `call` on the manager that has `instance`: the known one, or
    /// each live one in turn until one does not answer NOT_FOUND.
    async fn on_instance<T, F, Fut>(&self, instance: &str, call: F) -> Result<T, Status>
    where
        F: Fn(Arc<GrpcAgentControl>) -> Fut,
        Fut: std::future::Future<Output = Result<T, Status>>,
    {
        let id = Uuid::parse_str(instance).ok();
        let known = id.and_then(|id| self.lock().instances.get(&id).cloned());
        if let Some(client) = known.as_deref().and_then(|m| self.client_of(m)) {
            return call(client).await;
        }
        let mut last = Status::not_found(format!("agent instance {instance} not found"));
        for (manager, client) in self.live() {
            match call(client).await {
                Err(status) if status.code() == Code::NotFound => last = status,
                answer => {
                    if let Some(id) = id
                        && !manager.is_empty()
                    {
                        self.lock().instances.insert(id, manager);
                    }
                    return answer;
                }
            }
        }
        Err(last)
    }

    /// The manager that holds `task_id`'s workspace: the one that ran it
    /// last (known, or asked), or the fallback.
    async fn for_task(&self, task_id: &str) -> Option<Arc<GrpcAgentControl>> {
        let id = Uuid::parse_str(task_id).ok()?;
        let known = self.lock().tasks.get(&id).cloned();
        if let Some(client) = known.as_deref().and_then(|m| self.client_of(m)) {
            return Some(client);
        }
        let mut latest: Option<(String, String, Arc<GrpcAgentControl>)> = None;
        for (manager, client) in self.live() {
            if let Ok(instances) = client.list_instances(task_id).await
                && let Some(last) = instances.iter().map(|i| i.id.clone()).max()
                && latest.as_ref().is_none_or(|(l, _, _)| &last > l)
            {
                latest = Some((last, manager, client));
            }
        }
        let (_, manager, client) = latest?;
        if !manager.is_empty() {
            self.lock().tasks.insert(id, manager);
        }
        Some(client)
    }
}

#[async_trait]
impl AgentControl for ManagerPool {
    async fn launch(&self, request: pb::LaunchAgentRequest) -> Result<pb::AgentInstance, Status> {
        if !self.pooled() {
            return self.fallback.launch(request).await;
        }
        let candidates = self.candidates(&request.agent_type);
        let mut last = Status::unavailable(format!(
            "no agent manager has room for a run of {}",
            request.agent_type
        ));
        for (manager, client) in candidates {
            match client.launch(request.clone()).await {
                Ok(instance) => {
                    let mut state = self.lock();
                    if state.instances.len() >= ROUTES_KEPT {
                        state.instances.clear();
                        state.tasks.clear();
                    }
                    if let Some(m) = state.members.get_mut(&manager) {
                        m.placed += 1;
                    }
                    if let Ok(id) = Uuid::parse_str(&instance.id) {
                        state.instances.insert(id, manager.clone());
                    }
                    if let Ok(task) = Uuid::parse_str(&request.task_id) {
                        state.tasks.insert(task, manager.clone());
                    }
                    tracing::info!(task_id = %request.task_id, %manager, "run placed");
                    return Ok(instance);
                }
                // Full or unreachable since its announcement: the next one.
                Err(status) if status.code() == Code::Unavailable => {
                    tracing::info!(%manager, %status, "manager refused the run; trying another");
                    last = status;
                }
                Err(status) => return Err(status),
            }
        }
        Err(last)
    }

    fn take_to_reconcile(&self) -> Vec<String> {
        self.lock().to_reconcile.drain().collect()
    }

    fn manager_url(&self, manager_id: &str) -> Option<String> {
        self.lock()
            .members
            .get(manager_id)
            .map(|m| m.announcement.url.clone())
    }

    fn has_room(&self, agent_type: &str) -> bool {
        !self.pooled() || !self.candidates(agent_type).is_empty()
    }

    fn manager_gone(&self, manager_id: &str) -> bool {
        if manager_id.is_empty() || !self.pooled() {
            return false;
        }
        let now = Instant::now();
        // Not before this process has listened for a whole grace: a
        // manager it never heard may simply not have announced yet.
        if now.duration_since(self.started) < self.grace {
            return false;
        }
        self.lock()
            .members
            .get(manager_id)
            .is_none_or(|m| now.duration_since(m.heard) >= self.grace)
    }

    async fn active_on(&self, manager_id: &str) -> Result<Vec<pb::AgentInstance>, Status> {
        let client = self
            .client_of(manager_id)
            .ok_or_else(|| Status::not_found(format!("agent manager {manager_id}")))?;
        client.active_on(manager_id).await
    }

    async fn send_prompt(&self, instance_id: &str, prompt: &str) -> Result<(), Status> {
        self.on_instance(instance_id, |c| async move {
            c.send_prompt(instance_id, prompt).await
        })
        .await
    }

    async fn cancel(&self, instance_id: &str, reason: &str) -> Result<(), Status> {
        self.on_instance(instance_id, |c| async move {
            c.cancel(instance_id, reason).await
        })
        .await
    }

    async fn stop(&self, instance_id: &str, reason: &str) -> Result<(), Status> {
        self.on_instance(
            instance_id,
            |c| async move { c.stop(instance_id, reason).await },
        )
        .await
    }

    async fn respond_permission(
        &self,
        request: pb::RespondPermissionRequest,
    ) -> Result<(), Status> {
        let instance = request.instance_id.clone();
        self.on_instance(&instance, |c| {
            let request = request.clone();
            async move { c.respond_permission(request).await }
        })
        .await
    }

    async fn list_instances(&self, task_id: &str) -> Result<Vec<pb::AgentInstance>, Status> {
        let mut all = Vec::new();
        let mut last_err = None;
        let live = self.live();
        let asked = live.len();
        for (_, client) in live {
            match client.list_instances(task_id).await {
                Ok(mut list) => all.append(&mut list),
                Err(status) => last_err = Some(status),
            }
        }
        match last_err {
            Some(status) if all.is_empty() && asked > 0 => Err(status),
            _ => Ok(all),
        }
    }

    async fn deliver(&self, request: pb::DeliverChangesRequest) -> Result<pb::Delivery, Status> {
        match self.for_task(&request.task_id).await {
            Some(client) => client.deliver(request).await,
            None => Err(Status::failed_precondition(
                "no live agent manager has this task's workspace",
            )),
        }
    }

    async fn remove_workspace(&self, task_id: &str, keep_delivered: bool) -> Result<bool, Status> {
        match self.for_task(task_id).await {
            Some(client) => client.remove_workspace(task_id, keep_delivered).await,
            None => Ok(false),
        }
    }

    /// Users' secrets are in the managers' shared store: any live one.
    async fn open_user_secret(
        &self,
        scope: &str,
        name: &str,
    ) -> Result<secrecy::SecretString, Status> {
        match self.live().into_iter().next() {
            Some((_, client)) => client.open_user_secret(scope, name).await,
            None => Err(Status::unavailable("no live agent manager")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn announcement(id: &str, capacity: u32, active: u32, types: &[&str]) -> ManagerAnnouncement {
        ManagerAnnouncement {
            id: id.into(),
            url: format!("http://127.0.0.1:1/{id}"),
            capacity,
            active,
            agent_types: types.iter().map(|t| t.to_string()).collect(),
            every_ms: 60_000,
            leaving: false,
        }
    }

    fn pool() -> ManagerPool {
        ManagerPool::new(
            "http://127.0.0.1:1",
            &kandev_testkit::SERVICE_TOKEN.into(),
            Duration::from_secs(60),
        )
        .unwrap()
    }

    fn ids(list: Vec<(String, Arc<GrpcAgentControl>)>) -> Vec<String> {
        list.into_iter().map(|(id, _)| id).collect()
    }

    #[tokio::test]
    async fn placement_is_least_loaded_first_among_those_with_room_the_image_first() {
        let pool = pool();
        assert!(pool.has_room("mock-agent"), "no pool yet: the fallback");
        pool.heard(announcement("a", 2, 1, &["mock-agent"]));
        pool.heard(announcement("b", 4, 1, &["mock-agent"]));
        pool.heard(announcement("c", 2, 2, &["mock-agent"]));
        pool.heard(announcement("d", 0, 0, &["other"]));
        assert_eq!(ids(pool.candidates("mock-agent")), ["b", "a", "d"]);
        assert_eq!(ids(pool.candidates("other")), ["d", "b", "a"]);
        // Nobody has the image: the least loaded pulls it (or says why not).
        assert_eq!(ids(pool.candidates("missing")), ["d", "b", "a"]);

        // Runs placed since the last announcement count.
        pool.lock().members.get_mut("b").unwrap().placed = 3;
        assert_eq!(ids(pool.candidates("mock-agent")), ["a", "d"]);
        // A new announcement resets them; a leaving manager gets nothing.
        pool.heard(announcement("b", 4, 1, &["mock-agent"]));
        let mut leaving = announcement("a", 2, 0, &["mock-agent"]);
        leaving.leaving = true;
        pool.heard(leaving);
        assert_eq!(ids(pool.candidates("mock-agent")), ["b", "d"]);
        // Every one full: no room, the run waits.
        for id in ["b", "d"] {
            pool.heard(announcement(id, 1, 1, &["mock-agent"]));
        }
        assert!(!pool.has_room("mock-agent"));
        let mut reconcile = pool.take_to_reconcile();
        reconcile.sort();
        assert_eq!(reconcile, ["a", "b", "c", "d"], "each new one once");
        assert!(pool.take_to_reconcile().is_empty());
    }

    #[tokio::test]
    async fn a_manager_is_gone_only_after_the_grace() {
        let pool = ManagerPool::new(
            "http://127.0.0.1:1",
            &kandev_testkit::SERVICE_TOKEN.into(),
            Duration::ZERO,
        )
        .unwrap();
        assert!(!pool.manager_gone("a"), "no pool: nothing is gone");
        pool.heard(announcement("a", 2, 0, &["mock-agent"]));
        assert!(pool.manager_gone("a"), "a zero grace has passed");
        assert!(pool.manager_gone("never-heard"));
        assert!(!pool.manager_gone(""), "runs from before the pool");
        // Long gone (20 graces of zero): forgotten, and joins again.
        pool.take_to_reconcile();
        pool.heard(announcement("b", 2, 0, &["mock-agent"]));
        assert!(!pool.lock().members.contains_key("a"));
        pool.heard(announcement("a", 2, 0, &["mock-agent"]));
        assert!(pool.take_to_reconcile().contains(&"a".to_string()));

        let pool = self::pool();
        pool.heard(announcement("a", 2, 0, &["mock-agent"]));
        assert!(!pool.manager_gone("a"));
        assert!(
            !pool.manager_gone("never-heard"),
            "not before the pool listened for a whole grace"
        );
    }
}
