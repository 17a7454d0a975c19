//! The Postgres [`AgentStore`](super::AgentStore): the services'
//! deployment. Several managers may share the schema; instances are scoped
//! to their manager.

use sqlx::Postgres;

use super::SqlAgentStore;

/// The agent manager's tables on Postgres.
pub type PgAgentStore = SqlAgentStore<Postgres>;
