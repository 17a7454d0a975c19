//! The board's view of its cards: one request for every card and its live
//! execution, "Create" without starting, and the agent picker's facts.

use kandev_e2e::{Options, Stack, eventually, mock_task, serde_json::json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_request_gives_every_card_its_live_state() {
    let options = Options::default();
    let (stack, api, board) = Stack::start_with_board("board_cards", options, "cards").await;
    let started = api.task(&board, mock_task("Started", "echo hi")).await;
    let created = api
        .task(
            &board,
            json!({"title": "Created only", "description": "echo later",
                   "agent_type": "mock-agent", "autostart": false}),
        )
        .await;
    let plain = api.task(&board, json!({"title": "No agent"})).await;
    let cards_path = format!("/api/v1/boards/{board}/cards");

    // The started task runs to its end; meanwhile and after, the card of
    // the created-only task stays in TODO with no execution.
    api.wait_state(&started, &["COMPLETED"], 120).await;
    let cards = api.get(&cards_path).await;
    assert_eq!(cards.status, 200, "{}", cards.body);
    assert_eq!(cards.body["truncated"], false);
    let list = cards.body["cards"].as_array().unwrap();
    assert_eq!(list.len(), 3, "{}", cards.body);
    let card = |id: &str| {
        list.iter()
            .find(|c| c["task"]["id"] == id)
            .unwrap_or_else(|| panic!("card {id} in {}", cards.body))
            .clone()
    };
    let done = card(&started);
    assert_eq!(done["task"]["state"], "COMPLETED");
    assert_eq!(done["execution"]["state"], "completed", "{done}");
    assert!(
        done["execution"]["last_seq"].as_i64().unwrap() > 0,
        "{done}"
    );
    let waiting = card(&created);
    assert_eq!(waiting["task"]["state"], "TODO", "{waiting}");
    assert_eq!(waiting["task"]["autostart"], false, "{waiting}");
    assert_eq!(waiting["execution"]["state"], "idle", "{waiting}");
    assert_eq!(card(&plain)["execution"]["state"], "idle");

    // Started by hand, it runs like any other.
    api.start_task(&created).await;
    api.wait_state(&created, &["COMPLETED"], 120).await;
    eventually(30, "the card to show the completed run", || async {
        let cards = api.get(&cards_path).await;
        cards.body["cards"]
            .as_array()?
            .iter()
            .any(|c| c["task"]["id"] == created.as_str() && c["execution"]["state"] == "completed")
            .then_some(())
    })
    .await;

    // Someone else's board is not found.
    let unknown = "00000000-0000-4000-8000-000000000000";
    let missing = api.get(&format!("/api/v1/boards/{unknown}/cards")).await;
    assert_eq!(missing.status, 404, "{}", missing.body);

    // The picker's facts: internal types and missing credentials. The mock
    // agent is the demo, listed in the picker.
    let types = api.get("/api/v1/agent-types?include_disabled=true").await;
    assert_eq!(types.status, 200, "{}", types.body);
    let all = types.body["agent_types"].as_array().unwrap();
    let of = |id: &str| all.iter().find(|t| t["id"] == id).unwrap().clone();
    assert_eq!(of("mock-agent")["internal"], false);
    assert_eq!(of("mock-agent")["name"], "Mock agent (demo)");
    assert_eq!(of("seed-agent")["internal"], true);
    assert_eq!(of("claude-code")["internal"], false);
    assert_eq!(of("mock-agent")["missing_env"], json!([]));
    if std::env::var_os("ANTHROPIC_API_KEY").is_none() {
        assert_eq!(
            of("claude-code")["missing_env"],
            json!(["ANTHROPIC_API_KEY"])
        );
    }
    stack.stop().await;
}
