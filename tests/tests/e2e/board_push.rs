//! The board's live stream (`GET /boards/{id}/stream`), in both
//! deployments: a snapshot, then each card as it changes, pushed; nothing
//! of another user's board; a reconnect misses nothing.

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kandev_e2e::{
    Api, Options, Stack, deployments,
    serde_json::{Value, json},
};
use tokio_tungstenite::tungstenite::{self as tg, client::IntoClientRequest};

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens the board's stream as `api`'s user; `Err` with the HTTP status
/// when the gateway refuses the upgrade.
async fn open(api: &Api, board: &str) -> Result<Ws, u16> {
    let url = format!("ws://{}/api/v1/boards/{board}/stream", api.addr);
    let mut req = url.into_client_request().unwrap();
    let token = api.token.clone().unwrap();
    req.headers_mut().insert(
        "sec-websocket-protocol",
        format!("kandev.bearer, {token}").parse().unwrap(),
    );
    match tokio_tungstenite::connect_async(req).await {
        Ok((ws, resp)) => {
            assert_eq!(resp.headers()["sec-websocket-protocol"], "kandev.bearer");
            Ok(ws)
        }
        Err(tg::Error::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("board stream: {e}"),
    }
}

/// The next message within `secs`, as JSON.
async fn next(ws: &mut Ws, secs: u64) -> Option<Value> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        match tokio::time::timeout(left, ws.next()).await.ok()?? {
            Ok(tg::Message::Text(t)) => return Some(kandev_e2e::serde_json::from_str(&t).unwrap()),
            Ok(tg::Message::Close(f)) => panic!("closed: {f:?}"),
            Ok(_) => continue,
            Err(e) => panic!("board stream: {e}"),
        }
    }
}

fn state_of(cards: &Value, task: &str) -> Option<String> {
    cards.as_array()?.iter().find_map(|c| {
        (c["task"]["id"] == task).then(|| c["task"]["state"].as_str().unwrap().to_string())
    })
}

async fn set_state(api: &Api, task: &str, state: &str) {
    let r = api
        .patch(
            &format!("/api/v1/tasks/{task}/state"),
            json!({"state": state}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

/// The admin's board watched while its card changes, and bob's changes
/// to his own.
async fn walk(name: &str, options: Options) {
    let stack = Stack::start(name, options).await;
    let admin = stack.admin().await;
    let bob = stack.user(&admin, "bob", "correct horse battery").await;
    let board = admin.board("pushed").await;
    let task = admin.task(&board, json!({"title": "Pushed card"})).await;
    let bobs_board = bob.board("bob's").await;
    let bobs_task = bob.task(&bobs_board, json!({"title": "Bob's card"})).await;

    // Bad input and someone else's board are answered over HTTP.
    assert_eq!(
        open(&bob, &board).await.err(),
        Some(404),
        "bob cannot open the admin's board"
    );
    assert_eq!(open(&admin, "not-a-uuid").await.err(), Some(400));
    let plain = admin.get(&format!("/api/v1/boards/{board}/stream")).await;
    assert_eq!(plain.status, 400, "{}", plain.body);
    assert_eq!(plain.body["error"], "bad_request", "{}", plain.body);

    let mut ws = open(&admin, &board).await.unwrap();
    let first = next(&mut ws, 10).await.expect("a snapshot");
    assert_eq!(first["type"], "snapshot", "{first}");
    assert_eq!(first["seq"], 1);
    assert_eq!(
        state_of(&first["cards"], &task).as_deref(),
        Some("TODO"),
        "{first}"
    );
    assert_eq!(state_of(&first["cards"], &bobs_task), None, "{first}");

    // A state change reaches the client, pushed, at once.
    let started = Instant::now();
    set_state(&admin, &task, "BLOCKED").await;
    let pushed = loop {
        let m = next(&mut ws, 10).await.expect("the card pushed");
        if m["type"] == "card" && m["card"]["task"]["state"] == "BLOCKED" {
            break m;
        }
    };
    let took = started.elapsed();
    eprintln!("{name}: state change to pushed card in {took:?}");
    assert_eq!(pushed["card"]["task"]["id"], task.as_str(), "{pushed}");
    assert!(pushed["card"]["execution"].is_object(), "{pushed}");
    assert!(took < Duration::from_secs(2), "pushed after {took:?}");

    // Bob's change to his own task is not sent to the admin's board: the
    // next message is the admin's next change.
    set_state(&bob, &bobs_task, "BLOCKED").await;
    set_state(&admin, &task, "TODO").await;
    loop {
        let m = next(&mut ws, 10).await.expect("the next card");
        assert_ne!(m["card"]["task"]["id"], bobs_task.as_str(), "{m}");
        assert_ne!(m["task_id"], bobs_task.as_str(), "{m}");
        if m["card"]["task"]["state"] == "TODO" {
            break;
        }
    }

    // A change while disconnected is in the snapshot of the reconnect.
    drop(ws);
    set_state(&admin, &task, "CANCELLED").await;
    let mut ws = open(&admin, &board).await.unwrap();
    let again = next(&mut ws, 10).await.expect("a snapshot");
    assert_eq!(again["type"], "snapshot", "{again}");
    assert_eq!(
        state_of(&again["cards"], &task).as_deref(),
        Some("CANCELLED"),
        "{again}"
    );

    // A new task and a deleted one are pushed too.
    let added = admin.task(&board, json!({"title": "Added"})).await;
    loop {
        let m = next(&mut ws, 10).await.expect("the new card");
        if m["type"] == "card" && m["card"]["task"]["id"] == added.as_str() {
            break;
        }
    }
    admin.delete_task(&added).await;
    loop {
        let m = next(&mut ws, 10).await.expect("the removal");
        if m["type"] == "removed" && m["task_id"] == added.as_str() {
            break;
        }
    }
    drop(ws);
    stack.stop().await;
}

deployments! {
    walk("board_push"),
    four: board_changes_are_pushed_to_its_viewers_only_four_services,
    single: board_changes_are_pushed_to_its_viewers_only_kandev_binary,
}
