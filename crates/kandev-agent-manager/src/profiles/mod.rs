//! Agent profiles: named settings on an agent type (model, mode,
//! instructions, environment from the owner's secrets, MCP servers), owned
//! by a user or shared by an admin, chosen per task by the launch's
//! metadata (`agent_profile_id`).
//!
//! # Layout
//! - [`spec`]: the profile as data and its validation.
//! - [`resolve`]: what a run of a profile gets: the ACP `mcpServers`, the
//!   environment, with secrets opened only for the run.

pub mod resolve;
pub mod rpc;
pub mod spec;

use chrono::{SubsecRound, Utc};
use tracing::instrument;
use uuid::Uuid;

pub use resolve::ResolvedProfile;
pub use spec::{AgentProfile, McpServerSpec, McpTransport, ProfileSpec, declared_modes, field_err};

use crate::{
    domain::{AgentError, Result},
    store::Store,
};

/// The launch metadata key naming the task's profile.
pub use kandev_events::task::AGENT_PROFILE as METADATA_KEY;

/// Who asks: a user sees their own profiles and the shared ones, changes
/// their own, and an admin also the shared ones.
#[derive(Debug, Clone)]
pub struct Caller {
    pub scope: String,
    pub admin: bool,
}

impl Caller {
    fn can_see(&self, profile: &AgentProfile) -> bool {
        profile.owner.is_empty() || profile.owner == self.scope
    }

    fn can_change(&self, profile: &AgentProfile) -> bool {
        (profile.owner.is_empty() && self.admin) || profile.owner == self.scope
    }

    fn check(&self) -> Result<()> {
        if self.scope.trim().is_empty() {
            return Err(AgentError::InvalidArgument(
                "caller.scope (the user) is required".into(),
            ));
        }
        Ok(())
    }
}

fn not_found(id: Uuid) -> AgentError {
    AgentError::NotFound(format!("agent profile {id}"))
}

/// The profiles' domain API over the store.
#[derive(Debug, Clone)]
pub struct Profiles {
    store: Store,
}

impl Profiles {
    pub fn new(store: Store) -> Self {
        Profiles { store }
    }

    /// The caller's profiles and the shared ones, of one type or all.
    #[instrument(skip_all, fields(scope = %caller.scope), err)]
    pub async fn list(
        &self,
        caller: &Caller,
        agent_type: Option<&str>,
    ) -> Result<Vec<AgentProfile>> {
        caller.check()?;
        self.store.list_profiles(&caller.scope, agent_type).await
    }

    /// One profile the caller may see (another user's is not found).
    #[instrument(skip_all, fields(scope = %caller.scope, %id), err)]
    pub async fn get(&self, caller: &Caller, id: Uuid) -> Result<AgentProfile> {
        caller.check()?;
        match self.store.get_profile(id).await? {
            Some(p) if caller.can_see(&p) => Ok(p),
            _ => Err(not_found(id)),
        }
    }

    /// Creates (nil id) or replaces a profile, validated against its type.
    /// A new profile's owner is the caller, or nobody (shared) for an
    /// admin who asks; a replaced one keeps its owner.
    #[instrument(skip_all, fields(scope = %caller.scope, id = %profile.id), err)]
    pub async fn save(&self, caller: &Caller, mut profile: AgentProfile) -> Result<AgentProfile> {
        caller.check()?;
        let now = Utc::now().trunc_subsecs(6);
        if profile.id.is_nil() {
            if profile.owner.is_empty() && !caller.admin {
                return Err(AgentError::PermissionDenied(
                    "only an admin shares a profile".into(),
                ));
            }
            if !profile.owner.is_empty() {
                profile.owner.clone_from(&caller.scope);
            }
            profile.id = Uuid::now_v7();
            profile.created_at = now;
        } else {
            let existing = self.get(caller, profile.id).await?;
            if !caller.can_change(&existing) {
                return Err(AgentError::PermissionDenied(
                    "only an admin changes a shared profile".into(),
                ));
            }
            profile.owner = existing.owner;
            profile.created_at = existing.created_at;
        }
        profile.updated_at = now;
        let agent_type = match self.store.get_type(&profile.agent_type).await {
            Ok(t) => t,
            Err(AgentError::NotFound(_)) => {
                return Err(field_err(
                    "agent_type",
                    format!("no agent type {:?}", profile.agent_type),
                ));
            }
            Err(e) => return Err(e),
        };
        profile.validate(&agent_type)?;
        self.store.put_profile(&profile).await?;
        tracing::info!(profile = %profile.id, agent_type = %profile.agent_type, shared = profile.owner.is_empty(), "agent profile saved");
        Ok(profile)
    }

    #[instrument(skip_all, fields(scope = %caller.scope, %id), err)]
    pub async fn delete(&self, caller: &Caller, id: Uuid) -> Result<()> {
        let existing = self.get(caller, id).await?;
        if !caller.can_change(&existing) {
            return Err(AgentError::PermissionDenied(
                "only an admin deletes a shared profile".into(),
            ));
        }
        self.store.delete_profile(id).await?;
        Ok(())
    }

    /// The profile a launch for `scope` of `agent_type` names in its
    /// metadata, if any: refused (plainly) when it is not there, not the
    /// user's to use, or of another type.
    pub async fn for_launch(
        &self,
        metadata: &serde_json::Map<String, serde_json::Value>,
        scope: &str,
        agent_type: &str,
    ) -> Result<Option<AgentProfile>> {
        let Some(value) = metadata.get(METADATA_KEY).filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        let id = value
            .as_str()
            .and_then(|s| Uuid::parse_str(s.trim()).ok())
            .ok_or_else(|| {
                AgentError::FailedPrecondition(format!("{METADATA_KEY} is not a profile id"))
            })?;
        let caller = Caller {
            scope: scope.to_string(),
            admin: false,
        };
        let profile = match self.store.get_profile(id).await? {
            // A user's profile is theirs only; a shared one anyone's.
            Some(p) if caller.can_see(&p) => p,
            _ => {
                return Err(AgentError::FailedPrecondition(format!(
                    "the task's agent profile {id} is gone or not yours to use"
                )));
            }
        };
        if profile.agent_type != agent_type {
            return Err(AgentError::FailedPrecondition(format!(
                "the task's agent profile {:?} is for {}, not {agent_type}",
                profile.name, profile.agent_type
            )));
        }
        Ok(Some(profile))
    }
}
