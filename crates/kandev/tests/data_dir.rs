//! The data directory: one `kandev` at a time, and the secrets it makes on
//! first start are kept for the next.

use std::os::unix::fs::PermissionsExt as _;

use kandev::{Error, Kandev, SECRETS_KEY_FILE};

#[tokio::test]
async fn one_kandev_per_data_directory_and_the_sealing_key_is_kept() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Not the default port, which a running kandev may hold.
    let file = dir.path().join("kandev.toml");
    std::fs::write(&file, "listen_addr = \"127.0.0.1:0\"\n").expect("config file");
    let data = dir.path().join("data");

    let first = Kandev::build(&data, Some(&file))
        .await
        .expect("kandev builds on a fresh directory");
    let second = Kandev::build(&data, Some(&file)).await;
    assert!(
        matches!(second, Err(Error::Locked(_))),
        "a second kandev on the same directory is refused: {:?}",
        second.err()
    );
    let key_path = data.join(SECRETS_KEY_FILE);
    let key = std::fs::read_to_string(&key_path).expect("the sealing key was made");
    assert!(key.trim().len() >= 32, "a key of 32 bytes or more");
    let mode = std::fs::metadata(&key_path)
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "only its owner reads the key");

    drop(first);
    let again = Kandev::build(&data, Some(&file))
        .await
        .expect("the directory is free once the first is gone");
    assert_eq!(
        std::fs::read_to_string(&key_path).expect("the key"),
        key,
        "the same key on the next start"
    );
    drop(again);
}
