//! Which repository URLs a launch may clone: the allowed schemes, local
//! repositories only under configured roots, and no loopback, private or
//! link-local host unless allowed, so a user can neither read another
//! user's workspace through a `file://` clone nor probe the manager's
//! network. The checked URL is then cloned with git's `protocol.allow`
//! limited to what passed here (submodules and redirects included).

use std::{
    net::{IpAddr, Ipv4Addr},
    path::{Path, PathBuf},
    time::Duration,
};

use crate::{
    config::Settings,
    domain::{AgentError, Result, invalid},
};

/// How long a host name may take to resolve for the private-address check.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// A repository URL, by where it points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remote {
    /// `scheme://[user@]host[:port]/path`, or scp-like `user@host:path`
    /// (scheme `ssh`).
    Network { scheme: String, host: String },
    /// A path on the manager's host (`/srv/repo`, `file:///srv/repo`).
    Local(PathBuf),
}

/// Classifies `url` without touching the network or the disk.
pub fn parse(url: &str) -> Result<Remote> {
    if let Some((scheme, rest)) = url.split_once("://") {
        let scheme = scheme.to_ascii_lowercase();
        if scheme == "file" {
            return Ok(Remote::Local(PathBuf::from(rest)));
        }
        if scheme.is_empty()
            || !scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        {
            return Err(invalid(format!(
                "repository_url has an invalid scheme {scheme:?}"
            )));
        }
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        return Ok(Remote::Network {
            scheme,
            host: host_of(host_port)?,
        });
    }
    // git's transport helpers (`ext::cmd`, `fd::0`) are never URLs we take.
    if url.contains("::") {
        return Err(invalid("repository_url must be a URL or a path"));
    }
    // scp-like: a colon before any slash, e.g. `git@github.com:org/repo.git`.
    if let Some((host_part, _)) = url.split_once(':')
        && !host_part.contains('/')
        && !host_part.is_empty()
    {
        let host = host_part.rsplit_once('@').map_or(host_part, |(_, h)| h);
        return Ok(Remote::Network {
            scheme: "ssh".into(),
            host: host_of(host)?,
        });
    }
    Ok(Remote::Local(PathBuf::from(url)))
}

/// The host of `host[:port]` or `[v6]:port`, lower-cased.
fn host_of(host_port: &str) -> Result<String> {
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        v6.split_once(']').map(|(h, _)| h).unwrap_or(v6)
    } else {
        host_port.split(':').next().unwrap_or_default()
    };
    if host.is_empty() {
        return Err(invalid("repository_url has no host"));
    }
    Ok(host.trim_end_matches('.').to_ascii_lowercase())
}

/// Whether an address is one a user must not reach through the manager:
/// loopback, private, link-local, shared (CGNAT), unspecified, multicast,
/// documentation ranges and their IPv6 counterparts.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_internal_v4(v4);
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00 // unique local fc00::/7
                || (first & 0xffc0) == 0xfe80 // link-local fe80::/10
                || (first & 0xffc0) == 0xfec0 // site-local fec0::/10
        }
    }
}

fn is_internal_v4(v4: Ipv4Addr) -> bool {
    let [a, b, ..] = v4.octets();
    v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_unspecified()
        || v4.is_broadcast()
        || v4.is_multicast()
        || v4.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // shared address space
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
}

/// Checks `url` against the policy; the protocols git may then use.
pub async fn check(settings: &Settings, url: &str) -> Result<Vec<String>> {
    match parse(url)? {
        Remote::Local(path) => {
            check_local(settings, &path)?;
            Ok(vec!["file".into()])
        }
        Remote::Network { scheme, host } => {
            let allowed = &settings.allowed_repository_schemes;
            if !allowed.iter().any(|s| s.eq_ignore_ascii_case(&scheme)) {
                return Err(AgentError::PermissionDenied(format!(
                    "repository URLs with scheme {scheme:?} are not allowed (allowed: {})",
                    allowed.join(", ")
                )));
            }
            if !settings.allow_internal_repository_hosts {
                check_host(&host).await?;
            }
            Ok(allowed.iter().map(|s| s.to_ascii_lowercase()).collect())
        }
    }
}

fn check_local(settings: &Settings, path: &Path) -> Result<()> {
    let refused = || {
        AgentError::PermissionDenied(
            "local repositories are only cloned from under the allowed repository roots \
             (KANDEV_ALLOWED_REPOSITORY_ROOTS)"
                .into(),
        )
    };
    if !path.is_absolute() {
        return Err(refused());
    }
    let roots: Vec<PathBuf> = settings
        .allowed_repository_roots
        .iter()
        .filter_map(|root| Path::new(root).canonicalize().ok())
        .collect();
    if roots.is_empty() {
        return Err(refused());
    }
    // A repository that does not exist yet still gets git's own error, as
    // long as what does exist of its path lies under a root.
    let mut existing = path;
    let real = loop {
        if let Ok(real) = existing.canonicalize() {
            break real;
        }
        match existing.parent() {
            Some(parent) => existing = parent,
            None => return Err(refused()),
        }
    };
    if roots.iter().any(|root| real.starts_with(root)) {
        Ok(())
    } else {
        Err(refused())
    }
}

async fn check_host(host: &str) -> Result<()> {
    let refused = || {
        AgentError::PermissionDenied(format!(
            "repository host {host} is a loopback, private or link-local address"
        ))
    };
    if host == "localhost" || host.ends_with(".localhost") {
        return Err(refused());
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return if is_internal(ip) {
            Err(refused())
        } else {
            Ok(())
        };
    }
    // A name: refuse it when it resolves to an internal address. A name
    // that does not resolve is left to git, which says so.
    let lookup = tokio::net::lookup_host((host, 443));
    if let Ok(Ok(addrs)) = tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
        for addr in addrs {
            if is_internal(addr.ip()) {
                return Err(refused());
            }
        }
    }
    Ok(())
}

/// `git -c …` arguments that allow only `protocols` (for the clone and
/// anything it follows: submodules, redirects).
pub fn protocol_args(protocols: &[String]) -> Vec<String> {
    let mut args = vec!["-c".to_string(), "protocol.allow=never".to_string()];
    for protocol in protocols {
        args.push("-c".into());
        args.push(format!("protocol.{protocol}.allow=always"));
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    fn network(scheme: &str, host: &str) -> Remote {
        Remote::Network {
            scheme: scheme.into(),
            host: host.into(),
        }
    }

    #[test]
    fn urls_are_classified() {
        let cases = [
            (
                "https://github.com/org/repo.git",
                network("https", "github.com"),
            ),
            (
                "HTTPS://User:pw@GitHub.com:443/x",
                network("https", "github.com"),
            ),
            ("ssh://git@[::1]:22/x", network("ssh", "::1")),
            ("git@github.com:org/repo.git", network("ssh", "github.com")),
            ("host.example:repo", network("ssh", "host.example")),
            ("http://127.0.0.1:9/x", network("http", "127.0.0.1")),
            ("file:///srv/repo", Remote::Local("/srv/repo".into())),
            ("/srv/repo", Remote::Local("/srv/repo".into())),
            ("./repo:x", Remote::Local("./repo:x".into())),
        ];
        for (url, want) in cases {
            assert_eq!(parse(url).unwrap(), want, "{url}");
        }
        for bad in [
            "ext::sh -c id",
            "fd::0",
            "://x",
            "ht tp://x/y",
            "https:///path",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn internal_addresses() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
        ] {
            assert!(is_internal(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["140.82.112.3", "1.1.1.1", "2606:4700::1111"] {
            assert!(!is_internal(ip.parse().unwrap()), "{ip}");
        }
    }

    fn settings(roots: Vec<String>) -> Settings {
        Settings {
            allowed_repository_roots: roots,
            ..Settings::default()
        }
    }

    #[tokio::test]
    async fn the_policy_refuses_local_internal_and_unlisted_schemes() {
        let root = tempfile::tempdir().unwrap();
        let repo = root.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        let open = settings(vec![root.path().display().to_string()]);
        let closed = settings(vec![]);

        // Local: only under a root, symlinks and `..` resolved.
        let url = format!("file://{}", repo.display());
        assert_eq!(check(&open, &url).await.unwrap(), vec!["file"]);
        assert!(check(&open, &repo.display().to_string()).await.is_ok());
        let missing = root.path().join("not-yet");
        assert!(check(&open, &missing.display().to_string()).await.is_ok());
        for url in [
            url.clone(),
            "/etc".to_string(),
            format!("{}/../..", repo.display()),
            "relative/repo".to_string(),
        ] {
            let refused = check(&closed, &url).await.unwrap_err();
            assert!(matches!(refused, AgentError::PermissionDenied(_)), "{url}");
        }
        let escape = format!("{}/../../etc", repo.display());
        assert!(check(&open, &escape).await.is_err());
        let link = root.path().join("link");
        std::os::unix::fs::symlink("/etc", &link).unwrap();
        assert!(check(&open, &link.display().to_string()).await.is_err());

        // Network: allowed schemes, public hosts.
        assert_eq!(
            check(&open, "https://203.0.114.1/org/repo.git")
                .await
                .unwrap(),
            vec!["https", "ssh"]
        );
        for url in [
            "http://203.0.114.1/x",
            "git://203.0.114.1/x",
            "https://127.0.0.1:8080/x",
            "https://localhost/x",
            "https://[::1]/x",
            "https://169.254.169.254/latest",
            "git@10.0.0.1:org/repo.git",
            "ssh://git@192.168.1.1/x",
        ] {
            let refused = check(&open, url).await.unwrap_err();
            assert!(matches!(refused, AgentError::PermissionDenied(_)), "{url}");
        }
        // An operator can open internal hosts (a self-hosted forge).
        let internal = Settings {
            allow_internal_repository_hosts: true,
            ..Settings::default()
        };
        assert!(check(&internal, "https://10.0.0.5/x").await.is_ok());
    }

    #[test]
    fn git_gets_only_the_checked_protocols() {
        assert_eq!(
            protocol_args(&["https".into()]),
            [
                "-c",
                "protocol.allow=never",
                "-c",
                "protocol.https.allow=always"
            ]
        );
    }
}
