use kandev_proto::v1 as pb;
use tonic::Code;

use crate::helpers::spawn_app;

#[tokio::test]
async fn board_crud() {
    let mut app = spawn_app().await;
    let board = app.board().await;
    assert_eq!(board.name, "Board");
    assert_eq!(board.owner, "alice");
    assert!(board.created_at.is_some());

    let got = app
        .client
        .get_board(pb::GetBoardRequest {
            id: board.id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got, board);

    let renamed = app
        .client
        .update_board(pb::UpdateBoardRequest {
            id: board.id.clone(),
            name: Some("Renamed".into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(renamed.name, "Renamed");
    assert_eq!(renamed.description, "a board");

    app.client
        .create_board(pb::CreateBoardRequest {
            name: "Bob's".into(),
            owner: "bob".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let alice = app
        .client
        .list_boards(pb::ListBoardsRequest {
            owner: "alice".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(alice.boards.len(), 1);
    let all = app
        .client
        .list_boards(pb::ListBoardsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(all.boards.len(), 2);
    let paged = app
        .client
        .list_boards(pb::ListBoardsRequest {
            page_size: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(paged.boards.len(), 1);
    let second = app
        .client
        .list_boards(pb::ListBoardsRequest {
            page_size: 1,
            page_token: paged.next_page_token.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(second.boards.len(), 1);
    assert_ne!(second.boards[0].id, paged.boards[0].id);

    // Deleting a board deletes its tasks.
    let task = app.task(&board.id, "t").await;
    app.client
        .delete_board(pb::DeleteBoardRequest {
            id: board.id.clone(),
            actor: "alice".into(),
        })
        .await
        .unwrap();
    let err = app
        .client
        .get_board(pb::GetBoardRequest {
            id: board.id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = app.get_task(&task.id).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    app.stop().await;
}

#[tokio::test]
async fn board_bad_input() {
    let mut app = spawn_app().await;
    let err = app
        .client
        .create_board(pb::CreateBoardRequest {
            name: "   ".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("name"), "{}", err.message());

    let err = app
        .client
        .get_board(pb::GetBoardRequest { id: "nope".into() })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);

    let err = app
        .client
        .update_board(pb::UpdateBoardRequest {
            id: uuid::Uuid::new_v4().to_string(),
            name: Some("x".into()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);

    let err = app
        .client
        .list_boards(pb::ListBoardsRequest {
            page_token: "garbage".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    app.stop().await;
}
