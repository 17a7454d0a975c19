//! Agent profiles in both databases: each statement written once (`$N`
//! parameters, which SQLite takes too), bound and decoded the same way but
//! for a timestamp (Postgres `timestamptz`, SQLite fixed-width text), by
//! the one [`SqlAgentStore`] of both.

use chrono::{DateTime, Utc};
use kandev_common::db::{Dialect, Stmt};
use sqlx::types::Json;
use uuid::Uuid;

use super::SqlAgentStore;
use crate::{
    domain::{AgentError, Result},
    profiles::spec::{AgentProfile, ProfileSpec, field_err},
};

pub(super) const LIST: &str = "SELECT id, owner, agent_type, name, spec, created_at, updated_at \
     FROM agent_profiles WHERE (owner = $1 OR owner = '') AND ($2 IS NULL OR agent_type = $2) \
     ORDER BY agent_type, owner <> '', name";

pub(super) const GET: &str = "SELECT id, owner, agent_type, name, spec, created_at, updated_at \
     FROM agent_profiles WHERE id = $1";

pub(super) const PUT: &str = "INSERT INTO agent_profiles \
     (id, owner, agent_type, name, spec, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7) \
     ON CONFLICT (id) DO UPDATE SET agent_type = excluded.agent_type, name = excluded.name, \
     spec = excluded.spec, updated_at = excluded.updated_at";

pub(super) const DELETE: &str = "DELETE FROM agent_profiles WHERE id = $1";

/// A row as both databases decode it.
#[derive(sqlx::FromRow)]
pub(super) struct ProfileRow {
    id: Uuid,
    owner: String,
    agent_type: String,
    name: String,
    spec: Json<ProfileSpec>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<ProfileRow> for AgentProfile {
    fn from(r: ProfileRow) -> Self {
        AgentProfile {
            id: r.id,
            owner: r.owner,
            agent_type: r.agent_type,
            name: r.name,
            spec: r.spec.0,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// A name taken by another profile of the owner and type is the caller's
/// error; anything else the database's.
pub(super) fn put_error(err: sqlx::Error) -> AgentError {
    match &err {
        sqlx::Error::Database(db) if db.is_unique_violation() => field_err(
            "name",
            "another profile of this agent type already has this name",
        ),
        sqlx::Error::Database(db) if db.is_foreign_key_violation() => {
            field_err("agent_type", "no such agent type")
        }
        _ => AgentError::Storage(err),
    }
}

impl<D: Dialect> SqlAgentStore<D> {
    #[tracing::instrument(skip_all, err)]
    pub(super) async fn profiles_list(
        &self,
        scope: &str,
        agent_type: Option<&str>,
    ) -> Result<Vec<AgentProfile>> {
        let stmt = Stmt::new(LIST)
            .bind(scope)
            .bind(agent_type.map(str::to_string));
        let rows: Vec<ProfileRow> = self.db().all(stmt).await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    #[tracing::instrument(skip_all, fields(%id), err)]
    pub(super) async fn profiles_get(&self, id: Uuid) -> Result<Option<AgentProfile>> {
        let row: Option<ProfileRow> = self.db().optional(Stmt::new(GET).bind(id)).await?;
        Ok(row.map(Into::into))
    }

    #[tracing::instrument(skip_all, fields(id = %p.id), err)]
    pub(super) async fn profiles_put(&self, p: &AgentProfile) -> Result<()> {
        let spec = serde_json::to_value(&p.spec)
            .map_err(|e| AgentError::Internal(format!("a profile's spec as JSON: {e}")))?;
        let stmt = Stmt::new(PUT)
            .bind(p.id)
            .bind(&p.owner)
            .bind(&p.agent_type)
            .bind(&p.name)
            .bind(spec)
            .bind(p.created_at)
            .bind(p.updated_at);
        self.db().write(stmt).await.map_err(put_error)?;
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(%id), err)]
    pub(super) async fn profiles_delete(&self, id: Uuid) -> Result<bool> {
        Ok(self.db().write(Stmt::new(DELETE).bind(id)).await? > 0)
    }
}
