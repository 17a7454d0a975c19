//! What the gateway generates on its first start when it is not given: the
//! JWT signing key and the first admin's password. Both are kept in the data
//! directory (`KANDEV_DATA_DIR`, files of mode 0600 in a directory of mode
//! 0700) and reused on every later start, so tokens survive a restart and
//! the password can be read where the log says. Explicit values
//! (`KANDEV_JWT_SECRET`, `KANDEV_ADMIN_PASSWORD`) always win.

use std::{
    io::{self, Write as _},
    os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _},
    path::{Path, PathBuf},
};

use secrecy::SecretString;

/// The file of the signing key in the data directory.
pub const JWT_SECRET_FILE: &str = "jwt-secret";
/// The file of the first admin's password in the data directory.
pub const ADMIN_PASSWORD_FILE: &str = "admin-password";

/// A value kept in `dir/name`: read when the file exists, else made by
/// `make`, written there and returned with `true`. Several gateways sharing
/// the directory agree on one value: the file appears whole or not at all
/// (written aside, then hard-linked into place, which never replaces).
pub fn kept(
    dir: &Path,
    name: &str,
    make: impl FnOnce() -> String,
) -> io::Result<(SecretString, bool)> {
    let path = dir.join(name);
    if let Some(value) = read(&path)? {
        return Ok((value, false));
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let value = make();
    let aside = dir.join(format!(".{name}.{}", uuid::Uuid::new_v4().simple()));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&aside)?;
        file.write_all(value.as_bytes())?;
        file.write_all(b"\n")?;
        file.sync_all()?;
        std::fs::hard_link(&aside, &path)
    })();
    let _ = std::fs::remove_file(&aside);
    match written {
        Ok(()) => Ok((value.into(), true)),
        // Another gateway got there first: use its value.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => read(&path)?
            .map(|v| (v, false))
            .ok_or_else(|| io::Error::other(format!("{} is empty", path.display()))),
        Err(e) => Err(e),
    }
}

fn read(path: &PathBuf) -> io::Result<Option<SecretString>> {
    match std::fs::read_to_string(path) {
        Ok(text) if !text.trim().is_empty() => Ok(Some(text.trim().to_string().into())),
        Ok(_) => Err(io::Error::other(format!(
            "{} is empty: remove it to have a new value generated",
            path.display()
        ))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// A password of 24 letters and digits (about 140 bits).
pub fn random_password() -> String {
    const ALPHABET: &[u8] = b"abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    let mut out = String::with_capacity(24);
    while out.len() < 24 {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).expect("the OS random source works");
        // Rejection sampling keeps every character equally likely.
        let limit = 256 - 256 % ALPHABET.len();
        out.extend(
            bytes
                .iter()
                .filter(|b| usize::from(**b) < limit)
                .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
                .take(24 - out.len()),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use secrecy::ExposeSecret as _;

    use super::*;

    #[test]
    fn a_value_is_made_once_then_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let (first, made) = kept(&dir, "key", || "one".into()).unwrap();
        assert!(made);
        assert_eq!(first.expose_secret(), "one");
        let (again, made) = kept(&dir, "key", || "two".into()).unwrap();
        assert!(!made);
        assert_eq!(again.expose_secret(), "one");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.join("key")), 0o600);
        assert_eq!(mode(&dir), 0o700);
        // Nothing is left aside.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        // An empty file is an error that says what to do, not a blank key.
        std::fs::write(dir.join("blank"), "\n").unwrap();
        let err = kept(&dir, "blank", || "x".into()).unwrap_err();
        assert!(err.to_string().contains("remove it"), "{err}");
    }

    #[test]
    fn racing_gateways_agree_on_one_value() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let values: Vec<String> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let dir = &dir;
                    s.spawn(move || {
                        kept(dir, "key", || format!("value-{i}"))
                            .unwrap()
                            .0
                            .expose_secret()
                            .to_string()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(values.windows(2).all(|w| w[0] == w[1]), "{values:?}");
    }

    #[test]
    fn passwords_are_long_and_plain() {
        let a = random_password();
        assert_eq!(a.len(), 24);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, random_password());
    }
}
