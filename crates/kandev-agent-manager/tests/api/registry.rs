use kandev_proto::v1 as pb;
use tonic::Code;

use crate::helpers::spawn_app;

#[tokio::test]
async fn seeded_agent_types_and_upsert() {
    let mut app = spawn_app().await;
    let types = app
        .client
        .list_agent_types(pb::ListAgentTypesRequest {
            include_disabled: true,
        })
        .await
        .unwrap()
        .into_inner()
        .agent_types;
    let ids: Vec<&str> = types.iter().map(|t| t.id.as_str()).collect();
    for id in [
        "augment-agent",
        "auggie-cli",
        "claude-code",
        "codex",
        "gemini",
        "mock-agent",
    ] {
        assert!(ids.contains(&id), "{id} missing from {ids:?}");
    }
    let by_id = |id: &str| types.iter().find(|t| t.id == id).unwrap().clone();
    assert_eq!(by_id("mock-agent").image, "kandev/mock-agent:latest");
    assert_eq!(by_id("augment-agent").command, ["auggie", "--acp"]);
    assert_eq!(
        by_id("augment-agent").required_env,
        ["AUGMENT_SESSION_AUTH"]
    );
    // Each real agent runs from the image its Dockerfile under dockerfiles/ builds.
    for id in ["augment-agent", "claude-code", "gemini", "codex"] {
        assert_eq!(by_id(id).image, format!("kandev/{id}:latest"));
        let dockerfile = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../dockerfiles")
            .join(id)
            .join("Dockerfile");
        assert!(dockerfile.is_file(), "{} missing", dockerfile.display());
    }
    // The seed's other name for Augment runs the same agent.
    let auggie = by_id("auggie-cli");
    assert_eq!(auggie.image, "kandev/augment-agent:latest");
    assert_eq!(auggie.command, ["auggie", "--acp"]);
    assert_eq!(auggie.required_env, ["AUGMENT_SESSION_AUTH"]);
    assert_eq!(by_id("claude-code").command, ["claude-agent-acp"]);
    assert_eq!(by_id("claude-code").required_env, ["ANTHROPIC_API_KEY"]);
    assert_eq!(by_id("gemini").command, ["gemini", "--acp"]);
    assert_eq!(by_id("gemini").required_env, ["GEMINI_API_KEY"]);
    assert_eq!(by_id("codex").command, ["codex-acp"]);
    assert_eq!(by_id("codex").required_env, ["OPENAI_API_KEY"]);

    let mut custom = by_id("mock-agent");
    custom.id = "my-agent".into();
    custom.permission_policy = "ask".into();
    custom.memory_mb = 128;
    custom.enabled = false;
    let saved = app
        .client
        .upsert_agent_type(pb::UpsertAgentTypeRequest {
            agent_type: Some(custom.clone()),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(saved, custom);
    let enabled = app
        .client
        .list_agent_types(pb::ListAgentTypesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .agent_types;
    assert!(enabled.iter().all(|t| t.id != "my-agent"));

    custom.permission_policy = "sometimes".into();
    let err = app
        .client
        .upsert_agent_type(pb::UpsertAgentTypeRequest {
            agent_type: Some(custom),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);

    let err = app
        .client
        .get_agent_type(pb::GetAgentTypeRequest { id: "nope".into() })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    app.stop().await;
}

/// An agent type's state paths are `.gitignore` patterns, one line each:
/// kept as given, and anything else refused with the reason.
#[tokio::test]
async fn state_paths_are_gitignore_patterns() {
    let mut app = spawn_app().await;
    let mut t = app.agent_type("mock-agent").await;
    t.id = "stateful".into();
    t.state_paths = vec![".agent/".into(), "notes/*.tmp".into()];
    let saved = app
        .client
        .upsert_agent_type(pb::UpsertAgentTypeRequest {
            agent_type: Some(t.clone()),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(saved.state_paths, [".agent/", "notes/*.tmp"]);
    for bad in ["", "!keep", "# comment", "a\nb", " padded", "x\0y"] {
        t.state_paths = vec![bad.into()];
        let err = app
            .client
            .upsert_agent_type(pb::UpsertAgentTypeRequest {
                agent_type: Some(t.clone()),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{bad:?}");
        assert!(err.message().contains("state_paths"), "{}", err.message());
    }
    t.state_paths = (0..33).map(|i| format!("dir{i}/")).collect();
    let err = app
        .client
        .upsert_agent_type(pb::UpsertAgentTypeRequest {
            agent_type: Some(t),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    app.stop().await;
}
