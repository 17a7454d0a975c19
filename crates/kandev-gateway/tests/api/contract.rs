//! The users' storage contract: what every [`UserStore`] does, checked on
//! Postgres (a fresh database) and on SQLite (a fresh file).

use kandev_gateway::{
    Settings,
    startup::open_users,
    users::{UserError, Users},
};
use kandev_testkit::TestDb;

async fn users_on(database_url: String) -> Users {
    let settings = Settings {
        common: kandev_common::config::ServiceSettings {
            database_url,
            ..Settings::default().common
        },
        ..Settings::default()
    };
    open_users(&settings).await.expect("the database opens")
}

#[tokio::test]
async fn users_on_postgres() {
    let db = TestDb::create().await;
    let users = users_on(db.url.clone()).await;
    users_keep_their_names_and_roles(&users).await;
    users.close().await;
    db.drop_db().await;
}

#[tokio::test]
async fn users_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("gateway.db").display());
    let users = users_on(url.clone()).await;
    users_keep_their_names_and_roles(&users).await;
    users.close().await;
    // Opened again, the file keeps them (and migrating again is a no-op).
    let again = users_on(url).await;
    assert!(again.find("alice").await.unwrap().is_some());
    again.close().await;
}

async fn users_keep_their_names_and_roles(users: &Users) {
    users.ping().await.unwrap();
    assert!(users.find("alice").await.unwrap().is_none());
    assert!(!users.any_admin().await.unwrap());

    let bob = users.insert("bob", "$argon2id$bob", false).await.unwrap();
    assert!(!users.any_admin().await.unwrap(), "bob is no admin");
    let alice = users
        .insert("alice", "$argon2id$alice", true)
        .await
        .unwrap();
    assert_eq!((alice.username.as_str(), alice.is_admin), ("alice", true));
    assert!(users.any_admin().await.unwrap());
    assert_eq!(users.find("alice").await.unwrap(), Some(alice.clone()));
    assert_eq!(users.find("bob").await.unwrap(), Some(bob.clone()));
    assert_ne!(alice.id, bob.id);
    assert!(alice.created_at >= bob.created_at);
    assert!(
        users.find("Alice").await.unwrap().is_none(),
        "names are exact"
    );

    let taken = users
        .insert("alice", "$argon2id$other", false)
        .await
        .unwrap_err();
    assert!(
        matches!(taken, UserError::Exists(ref name) if name == "alice"),
        "{taken}"
    );
    assert_eq!(
        users.find("alice").await.unwrap().unwrap().password_hash,
        "$argon2id$alice",
        "the first keeps its password"
    );
}
