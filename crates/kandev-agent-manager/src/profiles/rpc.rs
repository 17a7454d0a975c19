//! The profiles' gRPC calls: proto <-> [`AgentProfile`], parsed at the
//! edge (an unknown transport is an error), then [`super::Profiles`].

use kandev_proto::{time::from_chrono, v1 as pb};
use uuid::Uuid;

use super::{AgentProfile, Caller, McpServerSpec, McpTransport, ProfileSpec, field_err};
use crate::{
    domain::{Result, invalid, parse_id},
    manager::AgentManager,
};

fn caller(c: Option<pb::ProfileCaller>) -> Result<Caller> {
    let c = c.ok_or_else(|| invalid("caller is required"))?;
    Ok(Caller {
        scope: c.scope,
        admin: c.admin,
    })
}

fn server_from_proto(i: usize, s: pb::McpServerSpec) -> Result<McpServerSpec> {
    let transport = McpTransport::parse(&s.transport).map_err(|_| {
        field_err(
            &format!("mcp_servers[{i}].transport"),
            format!("unknown transport {:?}: stdio, http or sse", s.transport),
        )
    })?;
    Ok(McpServerSpec {
        name: s.name,
        transport,
        command: s.command,
        args: s.args,
        env: s.env.into_iter().collect(),
        url: s.url,
        headers: s.headers.into_iter().collect(),
    })
}

fn from_proto(p: pb::AgentProfile) -> Result<AgentProfile> {
    let id = if p.id.trim().is_empty() {
        Uuid::nil()
    } else {
        parse_id("id", &p.id)?
    };
    let mcp_servers = p
        .mcp_servers
        .into_iter()
        .enumerate()
        .map(|(i, s)| server_from_proto(i, s))
        .collect::<Result<Vec<_>>>()?;
    Ok(AgentProfile {
        id,
        owner: p.owner,
        agent_type: p.agent_type,
        name: p.name,
        spec: ProfileSpec {
            model: p.model,
            mode: p.mode,
            instructions: p.instructions,
            env: p.env.into_iter().collect(),
            mcp_servers,
        },
        created_at: chrono::DateTime::UNIX_EPOCH,
        updated_at: chrono::DateTime::UNIX_EPOCH,
    })
}

/// The profile as served: secrets by name only (the profile holds no
/// values).
pub fn to_proto(p: AgentProfile) -> pb::AgentProfile {
    pb::AgentProfile {
        id: p.id.to_string(),
        owner: p.owner,
        agent_type: p.agent_type,
        name: p.name,
        model: p.spec.model,
        mode: p.spec.mode,
        instructions: p.spec.instructions,
        env: p.spec.env.into_iter().collect(),
        mcp_servers: p
            .spec
            .mcp_servers
            .into_iter()
            .map(|s| pb::McpServerSpec {
                name: s.name,
                transport: s.transport.as_str().to_string(),
                command: s.command,
                args: s.args,
                env: s.env.into_iter().collect(),
                url: s.url,
                headers: s.headers.into_iter().collect(),
            })
            .collect(),
        created_at: Some(from_chrono(p.created_at)),
        updated_at: Some(from_chrono(p.updated_at)),
    }
}

pub async fn list(
    m: &AgentManager,
    r: pb::ListAgentProfilesRequest,
) -> Result<pb::AgentProfileList> {
    let caller = caller(r.caller)?;
    let agent_type = Some(r.agent_type.as_str()).filter(|t| !t.is_empty());
    let profiles = m.profiles().list(&caller, agent_type).await?;
    Ok(pb::AgentProfileList {
        profiles: profiles.into_iter().map(to_proto).collect(),
    })
}

pub async fn get(m: &AgentManager, r: pb::GetAgentProfileRequest) -> Result<pb::AgentProfile> {
    let caller = caller(r.caller)?;
    let id = parse_id("id", &r.id)?;
    Ok(to_proto(m.profiles().get(&caller, id).await?))
}

pub async fn save(m: &AgentManager, r: pb::SaveAgentProfileRequest) -> Result<pb::AgentProfile> {
    let caller = caller(r.caller)?;
    let profile = from_proto(r.profile.ok_or_else(|| invalid("profile is required"))?)?;
    Ok(to_proto(m.profiles().save(&caller, profile).await?))
}

pub async fn delete(m: &AgentManager, r: pb::DeleteAgentProfileRequest) -> Result<()> {
    let caller = caller(r.caller)?;
    let id = parse_id("id", &r.id)?;
    m.profiles().delete(&caller, id).await
}
