//! Which repository URLs a launch may clone: the allowed schemes, local
//! repositories only under configured roots, and no host that reaches an
//! internal address (loopback, private, link-local, shared, unspecified,
//! multicast, broadcast or reserved) unless allowed, so a user can neither
//! read another user's workspace through a `file://` clone nor probe the
//! manager's network.
//!
//! A URL is read the way git reads it, so the host checked is the one git
//! connects to: for `ssh://` and `git://`, git percent-decodes the whole URL
//! first; for `http(s)://`, curl decodes the host, and takes IPv4 addresses
//! in the forms of `inet_aton` (`2130706433`, `0x7f.1`, `0177.0.0.1`,
//! `127.1`) and IPv6 ones with a zone id. Anything git and other URL
//! parsers read differently (a backslash, two `@`, a non-ASCII host, a
//! control character) is refused outright. Names are resolved and every
//! address must be external; a name that does not resolve is refused.
//!
//! What passed is then the only thing git may reach: [`check`] returns the
//! git settings for it (its protocol, and over http(s) and ssh the checked
//! address pinned, so a second resolution cannot move the connection),
//! and [`protocol_args`] adds those that hold for every command: no other
//! protocol, no redirect, no submodule.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    path::{Component, Path, PathBuf},
    time::Duration,
};

use crate::{
    config::Settings,
    domain::{AgentError, Result, invalid},
};

/// How long a host name may take to resolve for the internal-address check.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// How an operator opens internal hosts, appended to every such refusal.
const ALLOW_INTERNAL: &str =
    "set KANDEV_ALLOW_INTERNAL_REPOSITORY_HOSTS=true to allow internal hosts";

/// git settings every command that talks to a remote runs with.
const ALWAYS: [&str; 5] = [
    "protocol.allow=never",
    "http.followRedirects=false",
    "submodule.recurse=false",
    "fetch.recurseSubmodules=false",
    "push.recurseSubmodules=no",
];

/// Schemes git hands to curl, which reads their URLs itself.
const CURL_SCHEMES: [&str; 4] = ["http", "https", "ftp", "ftps"];

/// Where a network repository is, as git will connect to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// An address, whatever form the URL wrote it in.
    Ip(IpAddr),
    /// A lower-case ASCII name, to be resolved (a trailing dot kept).
    Name(String),
}

/// A repository URL, by where it points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remote {
    /// `scheme://[user@]host[:port]/path`, or scp-like `[user@]host:path`
    /// (scheme `ssh`).
    Network {
        scheme: String,
        host: Host,
        port: Option<u16>,
    },
    /// A path on the manager's host (`/srv/repo`, `file:///srv/repo`).
    Local(PathBuf),
}

/// Classifies `url` without touching the network or the disk.
pub fn parse(url: &str) -> Result<Remote> {
    if let Some((scheme, rest)) = url.split_once("://") {
        let scheme = scheme_of(scheme)?;
        if scheme == "file" {
            return local_url(rest);
        }
        refuse_odd_characters(url)?;
        // curl reads http(s) URLs itself; git decodes the others whole.
        if CURL_SCHEMES.contains(&scheme.as_str()) {
            let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
            return network(scheme, authority, true);
        }
        let decoded = percent_decode(rest)?;
        refuse_odd_characters(&decoded)?;
        return network(scheme, git_authority(&decoded, '/'), false);
    }
    if is_transport_helper(url) {
        return Err(invalid("repository_url must be a URL or a path"));
    }
    // scp-like: a colon before any slash, e.g. `git@github.com:org/repo.git`.
    match url.split_once(':') {
        Some((before, _)) if !before.contains('/') => {
            refuse_odd_characters(url)?;
            network("ssh".into(), git_authority(url, ':'), false)
        }
        _ => Ok(Remote::Local(PathBuf::from(url))),
    }
}

/// `file://<path>`, percent-decoded as git does.
fn local_url(rest: &str) -> Result<Remote> {
    let path = percent_decode(rest)?;
    if path.chars().any(char::is_control) {
        return Err(invalid(
            "repository_url must not contain control characters",
        ));
    }
    Ok(Remote::Local(PathBuf::from(path)))
}

/// The lower-cased scheme, if it is one (`[a-z][a-z0-9+.-]*`).
fn scheme_of(scheme: &str) -> Result<String> {
    let valid = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if valid {
        Ok(scheme.to_ascii_lowercase())
    } else {
        Err(invalid(format!(
            "repository_url has an invalid scheme {scheme:?}"
        )))
    }
}

/// git's `<helper>::<address>` (`ext::sh -c id`, `fd::0`): never taken.
fn is_transport_helper(url: &str) -> bool {
    url.split_once("::").is_some_and(|(helper, _)| {
        helper
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    })
}

/// Refuses what URL readers disagree on: whitespace and control
/// characters (a NUL ends git's copy of a decoded URL) and backslashes
/// (a path separator to WHATWG parsers, part of the user name to curl).
fn refuse_odd_characters(url: &str) -> Result<()> {
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid(
            "repository_url must not contain whitespace or control characters",
        ));
    }
    if url.contains('\\') {
        return Err(invalid("repository_url must not contain a backslash"));
    }
    Ok(())
}

/// `%XX` as its byte, as git's `url_decode` and curl's host decoding do; a
/// `%` not followed by two hex digits stays as it is.
fn percent_decode(text: &str) -> Result<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3).and_then(hex_byte))
            .flatten();
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| invalid("repository_url is not UTF-8 once percent-decoded"))
}

fn hex_byte(pair: &[u8]) -> Option<u8> {
    let digit = |b: u8| (b as char).to_digit(16);
    Some((digit(pair[0])? * 16 + digit(pair[1])?) as u8)
}

/// The `[user@]host[:port]` that git reads from a URL's rest (`separator`
/// `/`) or an scp-like address (`:`): up to the separator, searched from
/// the `]` of a bracketed host (`[::1]`, `user@[::1]`), as git's
/// `host_end` does.
fn git_authority(text: &str, separator: char) -> &str {
    let start = text.find("@[").map_or(0, |at| at + 1);
    let end = if text[start..].starts_with('[') {
        text[start..].find(']').map_or(0, |close| start + close)
    } else {
        0
    };
    text[end..]
        .find(separator)
        .map_or(text, |at| &text[..end + at])
}

/// `[user@]host[:port]`, with the host bracketed or not.
fn network(scheme: String, authority: &str, decode_host: bool) -> Result<Remote> {
    let host_port = match authority.split('@').collect::<Vec<_>>()[..] {
        [host_port] => host_port,
        [user, host_port] if !user.starts_with('-') => host_port,
        [_, _] => return Err(invalid("repository_url's user must not start with '-'")),
        _ => return Err(invalid("repository_url has more than one '@' in its host")),
    };
    let (host, bracketed, port) = split_port(host_port)?;
    Ok(Remote::Network {
        scheme,
        host: parse_host(host, bracketed, decode_host)?,
        port: parse_port(port)?,
    })
}

/// The host, whether it was bracketed, and the port text.
fn split_port(host_port: &str) -> Result<(&str, bool, &str)> {
    if let Some(rest) = host_port.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| invalid("repository_url has an unclosed '['"))?;
        let port = match after {
            "" => "",
            _ => after
                .strip_prefix(':')
                .ok_or_else(|| invalid("repository_url has text after its host's ']'"))?,
        };
        return Ok((host, true, port));
    }
    match host_port.split(':').collect::<Vec<_>>()[..] {
        [host] => Ok((host, false, "")),
        [host, port] => Ok((host, false, port)),
        _ => Err(invalid("repository_url has more than one ':' in its host")),
    }
}

fn parse_port(port: &str) -> Result<Option<u16>> {
    if port.is_empty() {
        return Ok(None);
    }
    match port.parse::<u16>() {
        Ok(n) if n > 0 && port.bytes().all(|b| b.is_ascii_digit()) => Ok(Some(n)),
        _ => Err(invalid(format!(
            "repository_url has an invalid port {port:?}"
        ))),
    }
}

/// An address or a name, from the host text of a URL. Bracketed, it is an
/// IPv6 address with an optional zone id (which changes nothing but for
/// link-local addresses) or, for git's ssh, any host.
fn parse_host(text: &str, bracketed: bool, decode: bool) -> Result<Host> {
    if bracketed {
        let address = text
            .split_once('%')
            .map_or(text, |(address, _zone)| address);
        if let Ok(v6) = address.parse::<Ipv6Addr>() {
            return Ok(Host::Ip(v6.into()));
        }
    }
    let decoded = if decode {
        percent_decode(text)?
    } else {
        text.to_string()
    };
    plain_host(&decoded)
}

/// A host name or an IPv4 address in any form `inet_aton` takes, refusing
/// what is neither.
fn plain_host(text: &str) -> Result<Host> {
    let written = text.to_ascii_lowercase();
    let host = written.strip_suffix('.').unwrap_or(&written);
    if host.is_empty() {
        return Err(invalid("repository_url has no host"));
    }
    if !host.is_ascii() {
        return Err(invalid(format!(
            "repository host {text} is not ASCII; write an international name in its \
             punycode (xn--) form"
        )));
    }
    if host.starts_with('-') {
        return Err(invalid(format!(
            "repository host {text} must not start with '-'"
        )));
    }
    let valid = host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && !host.split('.').any(str::is_empty);
    if !valid {
        return Err(invalid(format!(
            "repository host {text:?} is not a valid host name"
        )));
    }
    // Like curl and WHATWG: a host whose last label is a number is an
    // address, never a name.
    let last = host.rsplit('.').next().unwrap_or_default();
    if is_number(last) {
        return inet_aton(host)
            .map(|v4| Host::Ip(v4.into()))
            .ok_or_else(|| invalid(format!("repository host {text} is not a valid address")));
    }
    // With its trailing dot, if written: resolvers and curl's cache key
    // both keep it.
    Ok(Host::Name(written))
}

/// A decimal, octal (`0…`) or hex (`0x…`) number, as `inet_aton` reads it.
fn is_number(label: &str) -> bool {
    match label.strip_prefix("0x") {
        Some(hex) => hex.bytes().all(|b| b.is_ascii_hexdigit()),
        None => !label.is_empty() && label.bytes().all(|b| b.is_ascii_digit()),
    }
}

fn number(label: &str) -> Option<u32> {
    if let Some(hex) = label.strip_prefix("0x") {
        return if hex.is_empty() {
            Some(0)
        } else {
            u32::from_str_radix(hex, 16).ok()
        };
    }
    if label.len() > 1 && label.starts_with('0') {
        return u32::from_str_radix(&label[1..], 8).ok();
    }
    label.parse().ok()
}

/// `a.b.c.d`, `a.b.c` (c 16 bits), `a.b` (b 24 bits) or `a` (32 bits),
/// each part decimal, octal or hex, as curl and `inet_aton` read them.
fn inet_aton(host: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = host.split('.').collect();
    if parts.len() > 4 || !parts.iter().all(|p| is_number(p)) {
        return None;
    }
    let numbers = parts
        .iter()
        .map(|p| number(p))
        .collect::<Option<Vec<u32>>>()?;
    let (last, leading) = numbers.split_last()?;
    if leading.iter().any(|&n| n > 255) {
        return None;
    }
    let last_bits = 32 - 8 * leading.len() as u32;
    if last_bits < 32 && *last >= 1 << last_bits {
        return None;
    }
    let high = leading
        .iter()
        .enumerate()
        .fold(0u32, |acc, (i, &n)| acc | (n << (24 - 8 * i as u32)));
    Some(Ipv4Addr::from(high | last))
}

/// Whether an address is one a user must not reach through the manager.
pub fn is_internal(ip: IpAddr) -> bool {
    internal_kind(ip).is_some()
}

/// What makes `ip` internal ("a loopback address", "an IPv4-mapped form of
/// 10.0.0.1, a private address"), or `None` for an external address.
fn internal_kind(ip: IpAddr) -> Option<String> {
    match ip {
        IpAddr::V4(v4) => v4_kind(v4).map(|kind| format!("{kind} address")),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some((form, v4)) => v4_kind(v4).map(|kind| format!("{form} of {v4}, {kind} address")),
            None => v6_kind(v6).map(|kind| format!("{kind} address")),
        },
    }
}

fn v4_kind(v4: Ipv4Addr) -> Option<&'static str> {
    let kind = match v4.octets() {
        [0, ..] => "an unspecified (\"this network\")",
        [127, ..] => "a loopback",
        [10, ..] | [172, 16..=31, ..] | [192, 168, ..] => "a private",
        [169, 254, ..] => "a link-local",
        [100, 64..=127, ..] => "a shared (CGNAT)",
        [192, 0, 2, _] | [198, 51, 100, _] | [203, 0, 113, _] => "a documentation",
        [198, 18..=19, ..] => "a benchmarking",
        [192, 0, 0, _] | [192, 88, 99, _] => "a reserved",
        [224..=239, ..] => "a multicast",
        [255, 255, 255, 255] => "a broadcast",
        [240..=255, ..] => "a reserved",
        _ => return None,
    };
    Some(kind)
}

/// The IPv4 address an IPv6 one reaches through: v4-mapped
/// (`::ffff:a.b.c.d`), v4-compatible (`::a.b.c.d`), NAT64 (`64:ff9b::/96`)
/// and 6to4 (`2002:AABB:CCDD::/48`).
fn embedded_v4(v6: Ipv6Addr) -> Option<(&'static str, Ipv4Addr)> {
    let o = v6.octets();
    let tail = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    match v6.segments() {
        [0, 0, 0, 0, 0, 0xffff, ..] => Some(("an IPv4-mapped form", tail)),
        [0x64, 0xff9b, 0, 0, 0, 0, ..] => Some(("a NAT64 form", tail)),
        [0x2002, ..] => Some(("a 6to4 form", Ipv4Addr::new(o[2], o[3], o[4], o[5]))),
        [0, 0, 0, 0, 0, 0, ..] if !v6.is_loopback() && !v6.is_unspecified() => {
            Some(("an IPv4-compatible form", tail))
        }
        _ => None,
    }
}

/// Anything outside global unicast (2000::/3) is internal or reserved, and
/// so are the special ranges inside it.
fn v6_kind(v6: Ipv6Addr) -> Option<&'static str> {
    let s = v6.segments();
    let kind = match s[0] {
        _ if v6.is_loopback() => "a loopback",
        _ if v6.is_unspecified() => "an unspecified",
        first if first & 0xff00 == 0xff00 => "a multicast",
        first if first & 0xfe00 == 0xfc00 => "a unique-local",
        first if first & 0xffc0 == 0xfe80 => "a link-local",
        first if first & 0xffc0 == 0xfec0 => "a site-local",
        0x2001 if s[1] == 0x0db8 => "a documentation",
        0x3fff if s[1] < 0x1000 => "a documentation",
        // IETF protocol assignments (Teredo, benchmarking, ORCHID).
        0x2001 if s[1] < 0x0200 => "a reserved",
        first if first & 0xe000 != 0x2000 => "a reserved",
        _ => return None,
    };
    Some(kind)
}

/// Checks `url` against the policy; the git settings (`key=value`, each
/// for a `-c`) that let git reach only what was checked: its protocol,
/// and the host name pinned to the addresses checked (over http(s) for
/// curl, over ssh by `core.sshCommand`, see [`ssh_pin`]). Give them to
/// [`protocol_args`].
pub async fn check(settings: &Settings, url: &str) -> Result<Vec<String>> {
    match parse(url)? {
        Remote::Local(path) => {
            check_local(settings, &path)?;
            Ok(vec![allow_protocol("file")])
        }
        Remote::Network { scheme, host, port } => {
            check_scheme(settings, &scheme)?;
            let mut config = vec![allow_protocol(git_protocol(&scheme))];
            if settings.allow_internal_repository_hosts {
                return Ok(config);
            }
            let port = port.unwrap_or_else(|| default_port(&scheme));
            let addrs = check_host(&host, port).await?;
            if let Host::Name(name) = &host {
                if CURL_SCHEMES.contains(&scheme.as_str()) {
                    config.push(curl_resolve(name, port, &addrs));
                } else if git_protocol(&scheme) == "ssh" {
                    config.extend(ssh_pin(name, port, &addrs));
                }
            }
            Ok(config)
        }
    }
}

/// What [`check`] can tell without the network: the URL as git reads it,
/// its scheme, a host written as an internal address or a loopback name,
/// and a local path under the allowed roots. A host name is not resolved
/// (the launch's [`check`] resolves it). Returns where the URL points.
pub fn check_offline(settings: &Settings, url: &str) -> Result<Remote> {
    let remote = parse(url)?;
    match &remote {
        Remote::Local(path) => check_local(settings, path)?,
        Remote::Network { scheme, host, .. } => {
            check_scheme(settings, scheme)?;
            if !settings.allow_internal_repository_hosts {
                check_written_host(host)?;
            }
        }
    }
    Ok(remote)
}

fn check_scheme(settings: &Settings, scheme: &str) -> Result<()> {
    let allowed = &settings.allowed_repository_schemes;
    if allowed.iter().any(|s| s.eq_ignore_ascii_case(scheme)) {
        return Ok(());
    }
    Err(AgentError::PermissionDenied(format!(
        "repository URLs with scheme {scheme:?} are not allowed (allowed: {})",
        allowed.join(", ")
    )))
}

fn allow_protocol(protocol: &str) -> String {
    format!("protocol.{protocol}.allow=always")
}

/// The name of a scheme in git's `protocol.<name>.allow`.
fn git_protocol(scheme: &str) -> &str {
    match scheme {
        "git+ssh" | "ssh+git" => "ssh",
        other => other,
    }
}

fn default_port(scheme: &str) -> u16 {
    match scheme {
        "http" => 80,
        "ftp" => 21,
        "ftps" => 990,
        "git" => 9418,
        "https" => 443,
        _ => 22,
    }
}

fn check_local(settings: &Settings, path: &Path) -> Result<()> {
    let refused = || outside_roots(settings, path);
    if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
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

/// The refusal of a local repository outside the allowed roots, naming
/// the roots (a person can then pick a repository under one), or saying
/// that none is set.
fn outside_roots(settings: &Settings, path: &Path) -> AgentError {
    let roots = &settings.allowed_repository_roots;
    let absolute = path.is_absolute();
    let path = path.display();
    AgentError::PermissionDenied(if roots.is_empty() {
        format!(
            "{path} is a local repository, and Kandev may use none: no repository roots are \
             set (KANDEV_ALLOWED_REPOSITORY_ROOTS)"
        )
    } else if absolute {
        format!(
            "{path} is outside the repositories Kandev may use: {}",
            roots.join(", ")
        )
    } else {
        format!(
            "{path} is not an absolute path; Kandev may use the repositories under: {}",
            roots.join(", ")
        )
    })
}

/// The addresses of an external host; refuses an internal one.
async fn check_host(host: &Host, port: u16) -> Result<Vec<IpAddr>> {
    check_written_host(host)?;
    match host {
        Host::Ip(ip) => Ok(vec![*ip]),
        Host::Name(name) => check_resolved(name, &resolve(name, port).await?),
    }
}

/// Refuses a host that is internal as the URL writes it: an internal
/// address, or a loopback name. A name is not resolved here.
fn check_written_host(host: &Host) -> Result<()> {
    match host {
        Host::Ip(ip) => match internal_kind(*ip) {
            Some(kind) => Err(denied(format!("repository host {ip} is {kind}"))),
            None => Ok(()),
        },
        Host::Name(name) if is_localhost(name) => {
            Err(denied(format!("repository host {name} is a loopback name")))
        }
        Host::Name(_) => Ok(()),
    }
}

/// `localhost` and its subdomains (RFC 6761), which resolvers (curl's
/// among them) answer with loopback whatever DNS says.
fn is_localhost(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    name == "localhost" || name.ends_with(".localhost")
}

/// The addresses `name` resolves to, refusing a name that does not.
async fn resolve(name: &str, port: u16) -> Result<Vec<IpAddr>> {
    let unresolved = |why: String| unresolvable(name, &why);
    let lookup = tokio::net::lookup_host((name, port));
    let addrs = tokio::time::timeout(RESOLVE_TIMEOUT, lookup)
        .await
        .map_err(|_| unresolved(format!("no answer in {} s", RESOLVE_TIMEOUT.as_secs())))?
        .map_err(|e| unresolved(e.to_string()))?;
    let mut ips: Vec<IpAddr> = addrs.map(|a| a.ip()).collect();
    ips.sort();
    ips.dedup();
    Ok(ips)
}

/// `addrs` if `name` resolved to some and all are external.
fn check_resolved(name: &str, addrs: &[IpAddr]) -> Result<Vec<IpAddr>> {
    if addrs.is_empty() {
        return Err(unresolvable(name, "no address"));
    }
    for ip in addrs {
        if let Some(kind) = internal_kind(*ip) {
            return Err(denied(format!(
                "repository host {name} resolves to {ip}, {kind}"
            )));
        }
    }
    Ok(addrs.to_vec())
}

/// A host that cannot be checked is not cloned from (rather than left to
/// git, whose own lookup could then answer differently).
fn unresolvable(name: &str, why: &str) -> AgentError {
    AgentError::PermissionDenied(format!(
        "repository host {name} does not resolve ({why}), so it is refused"
    ))
}

fn denied(why: String) -> AgentError {
    AgentError::PermissionDenied(format!("{why}; {ALLOW_INTERNAL}"))
}

/// `http.curloptResolve` (git 2.37+) pinning `name` (as curl looks it
/// up: lower-cased, a trailing dot kept) to `addrs`.
fn curl_resolve(name: &str, port: u16, addrs: &[IpAddr]) -> String {
    let list: Vec<String> = addrs
        .iter()
        .map(|ip| match ip {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("[{v6}]"),
        })
        .collect();
    format!("http.curloptResolve={name}:{port}:{}", list.join(","))
}

/// `core.sshCommand` pinning ssh to the first address checked for `name`
/// (IPv4 before IPv6; without brackets, as `HostName` takes it) while
/// host keys are still looked up under the name: `HostKeyAlias` is the
/// name, or `[name]:port` off port 22, as ssh writes known_hosts entries
/// (an alias gets no port added). git runs the command through the shell
/// with its own arguments (`-p port`, the host, the remote command) after
/// it, so only a name of letters, digits, `.`, `-` and `_` (all
/// `plain_host` lets through) is written, and inside single quotes; for any
/// other, or no address, nothing is pinned. `GIT_SSH_COMMAND` or `GIT_SSH`
/// in the manager's environment overrides this setting in git, and then
/// ssh resolves the name itself again.
fn ssh_pin(name: &str, port: u16, addrs: &[IpAddr]) -> Option<String> {
    let ip = addrs.first()?;
    let plain = !name.is_empty()
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
    if !plain {
        return None;
    }
    let alias = if port == 22 {
        name.to_string()
    } else {
        format!("[{name}]:{port}")
    };
    Some(format!(
        "core.sshCommand=ssh -o 'HostName={ip}' -o 'HostKeyAlias={alias}'"
    ))
}

/// `git -c …` arguments for a command that talks to a remote: the
/// settings [`check`] returned, after those that always hold (no other
/// protocol, no redirect, no submodule). They go before the subcommand.
pub fn protocol_args(config: &[String]) -> Vec<String> {
    ALWAYS
        .iter()
        .map(|setting| setting.to_string())
        .chain(config.iter().cloned())
        .flat_map(|setting| ["-c".to_string(), setting])
        .collect()
}

/// Drops the user part of a URL so credentials never reach a message.
pub fn redact_url(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('@') {
            Some((userinfo, host)) if !userinfo.contains('/') => format!("{scheme}://***@{host}"),
            _ => url.to_string(),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn network(scheme: &str, host: Host, port: Option<u16>) -> Remote {
        Remote::Network {
            scheme: scheme.into(),
            host,
            port,
        }
    }

    fn name(name: &str) -> Host {
        Host::Name(name.into())
    }

    fn ip(ip: &str) -> Host {
        Host::Ip(ip.parse().unwrap())
    }

    fn settings(roots: Vec<String>) -> Settings {
        Settings {
            allowed_repository_roots: roots,
            ..Settings::default()
        }
    }

    /// Every scheme a bypass could use, so that only the host check refuses.
    fn every_scheme() -> Settings {
        Settings {
            allowed_repository_schemes: ["https", "http", "ssh", "git+ssh", "git", "ftp"]
                .map(String::from)
                .to_vec(),
            ..Settings::default()
        }
    }

    #[test]
    fn urls_are_classified_as_git_reads_them() {
        let cases = [
            (
                "https://github.com/org/repo.git",
                network("https", name("github.com"), None),
            ),
            (
                "HTTPS://User:pw@GitHub.com.:443/x",
                network("https", name("github.com."), Some(443)),
            ),
            ("ssh://git@[::1]:22/x", network("ssh", ip("::1"), Some(22))),
            (
                "git@github.com:org/repo.git",
                network("ssh", name("github.com"), None),
            ),
            (
                "host.example:repo",
                network("ssh", name("host.example"), None),
            ),
            ("git@[::1]:x", network("ssh", ip("::1"), None)),
            (
                "http://127.0.0.1:9/x",
                network("http", ip("127.0.0.1"), Some(9)),
            ),
            // curl decodes the host, and reads inet_aton's forms.
            (
                "https://%6c%6f%63%61%6c%68%6f%73%74:9/x.git",
                network("https", name("localhost"), Some(9)),
            ),
            ("http://0x7f.1/x", network("http", ip("127.0.0.1"), None)),
            (
                "http://2130706433/x",
                network("http", ip("127.0.0.1"), None),
            ),
            (
                "http://0177.0.0.1/x",
                network("http", ip("127.0.0.1"), None),
            ),
            ("http://127.1/x", network("http", ip("127.0.0.1"), None)),
            ("http://10.0x10203/x", network("http", ip("10.1.2.3"), None)),
            (
                "http://[::ffff:127.0.0.1%25lo]:9/x.git",
                network("http", ip("::ffff:127.0.0.1"), Some(9)),
            ),
            (
                "https://github.com@127.0.0.1/x",
                network("https", ip("127.0.0.1"), None),
            ),
            ("http://h:08080/x", network("http", name("h"), Some(8080))),
            // git decodes ssh:// and git:// URLs whole, '@' and brackets included.
            (
                "ssh://evil%40127.0.0.1/x",
                network("ssh", ip("127.0.0.1"), None),
            ),
            ("ssh://%5b::1%5d/x", network("ssh", ip("::1"), None)),
            ("ssh://[1.2.3.4]/x", network("ssh", ip("1.2.3.4"), None)),
            ("file:///srv/repo", Remote::Local("/srv/repo".into())),
            ("file:///srv/%72epo", Remote::Local("/srv/repo".into())),
            ("/srv/repo", Remote::Local("/srv/repo".into())),
            ("./repo:x", Remote::Local("./repo:x".into())),
            ("/srv/a::b", Remote::Local("/srv/a::b".into())),
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
            "http://github.com\\@127.0.0.1/x",
            "http://a@b@127.0.0.1/x",
            "http://１２７.０.０.１/x",
            "http://1.2.3.4.5/x",
            "http://256.0.0.1/x",
            "http://09.0.0.1/x",
            "http://127.0.0.1:0x50/x",
            "http://127.0.0.1:+80/x",
            "http://h:1:2/x",
            "http://[::1]x/y",
            "http://h%00.example/x",
            "ssh://127.0.0.1%00@github.com/x",
            "ssh://h?x/y",
            "ssh://-oProxyCommand=x/y",
            "ssh://git@-oProxyCommand=x/y",
            "ssh://-oProxyCommand=x@github.com/y",
            "-oProxyCommand=x:y",
            "git@-oProxyCommand=x:y",
            "ssh://[git@127.0.0.1]:22/x",
            "file:///srv/repo%00/x",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    /// The forms of the security review (issue 37) and their relatives:
    /// each reaches an internal address, and each is refused without a
    /// name ever being resolved.
    #[tokio::test]
    async fn every_way_of_writing_an_internal_host_is_refused() {
        let cases = [
            // The two URLs of the finding.
            (
                "https://%6c%6f%63%61%6c%68%6f%73%74:9/x.git",
                "localhost is a loopback name",
            ),
            (
                "http://[::ffff:127.0.0.1%25lo]:9/x.git",
                "IPv4-mapped form of 127.0.0.1, a loopback address",
            ),
            (
                "http://[::ffff:127.0.0.1%lo]:9/x.git",
                "127.0.0.1, a loopback",
            ),
            ("http://%31%32%37.0.0.1/x", "127.0.0.1 is a loopback"),
            ("http://2130706433/x", "127.0.0.1 is a loopback"),
            ("http://0177.0.0.1/x", "127.0.0.1 is a loopback"),
            ("http://0x7f.1/x", "127.0.0.1 is a loopback"),
            ("http://0x7F000001/x", "127.0.0.1 is a loopback"),
            ("http://127.1/x", "127.0.0.1 is a loopback"),
            ("http://127.0.0.1./x", "127.0.0.1 is a loopback"),
            ("http://LOCALHOST./x", "localhost. is a loopback"),
            ("https://api.LocalHost/x", "api.localhost is a loopback"),
            ("https://github.com@127.0.0.1/x", "127.0.0.1 is a loopback"),
            (
                "https://github.com:443@127.0.0.1/x",
                "127.0.0.1 is a loopback",
            ),
            ("http://github.com\\@127.0.0.1/x", "backslash"),
            ("http://a@b@127.0.0.1/x", "more than one '@'"),
            ("http://１２７.０.０.１/x", "punycode"),
            ("https://10.0.0.1/x", "a private address"),
            ("https://172.16.0.1/x", "a private address"),
            ("https://192.168.1.1/x", "a private address"),
            ("https://169.254.169.254/latest", "a link-local address"),
            ("https://100.64.0.1/x", "shared (CGNAT)"),
            ("https://0.0.0.0/x", "unspecified"),
            ("https://0/x", "unspecified"),
            ("https://224.0.0.1/x", "a multicast address"),
            ("https://255.255.255.255/x", "a broadcast address"),
            ("https://240.0.0.1/x", "a reserved address"),
            ("https://192.0.0.8/x", "a reserved address"),
            ("https://198.18.0.1/x", "a benchmarking address"),
            ("https://192.0.2.1/x", "a documentation address"),
            ("https://[::1]/x", "::1 is a loopback address"),
            ("https://[0:0:0:0:0:0:0:1]/x", "::1 is a loopback address"),
            ("https://[::]/x", "an unspecified address"),
            (
                "https://[::127.0.0.1]/x",
                "IPv4-compatible form of 127.0.0.1",
            ),
            (
                "https://[::ffff:a9fe:a9fe]/x",
                "form of 169.254.169.254, a link-local",
            ),
            ("https://[64:ff9b::7f00:1]/x", "NAT64 form of 127.0.0.1"),
            (
                "https://[64:ff9b::10.0.0.1]/x",
                "NAT64 form of 10.0.0.1, a private",
            ),
            ("https://[64:ff9b:1::1]/x", "a reserved address"),
            ("https://[2002:7f00:1::1]/x", "6to4 form of 127.0.0.1"),
            ("https://[2002:c0a8:101::1]/x", "6to4 form of 192.168.1.1"),
            ("https://[fd00::1]/x", "a unique-local address"),
            ("https://[fc00::1]/x", "a unique-local address"),
            ("https://[fe80::1%25eth0]/x", "a link-local address"),
            ("https://[fec0::1]/x", "a site-local address"),
            ("https://[ff02::1]/x", "a multicast address"),
            ("https://[100::1]/x", "a reserved address"),
            ("https://[2001::1]/x", "a reserved address"),
            ("https://[2001:db8::1]/x", "a documentation address"),
            ("ssh://[::1]/x", "::1 is a loopback"),
            ("git@[::1]:x", "::1 is a loopback"),
            ("[::1]:x", "::1 is a loopback"),
            ("git@0x7f.1:x", "127.0.0.1 is a loopback"),
            ("ssh://git@127.1:22/x", "127.0.0.1 is a loopback"),
            (
                "ssh://%6c%6f%63%61%6c%68%6f%73%74/x",
                "localhost is a loopback",
            ),
            ("ssh://evil%40127.0.0.1/x", "127.0.0.1 is a loopback"),
            ("ssh://%5b::1%5d/x", "::1 is a loopback"),
            ("ssh://[::ffff:127.0.0.1%25lo]/x", "127.0.0.1, a loopback"),
            ("ssh://[localhost]/x", "localhost is a loopback"),
            // git's host_end looks for "@[" anywhere: ssh gets `h/x@127.0.0.1`.
            ("ssh://h/x@[127.0.0.1]/z", "127.0.0.1 is a loopback"),
            ("h:x@[127.0.0.1]:y", "127.0.0.1 is a loopback"),
            ("git+ssh://10.1.2.3/x", "a private address"),
            (
                "git://%6c%6f%63%61%6c%68%6f%73%74:1/x",
                "localhost is a loopback",
            ),
            ("ftp://127.0.0.1/x", "a loopback"),
            ("ssh://-oProxyCommand=x/y", "must not start with '-'"),
            ("ssh://git@-oProxyCommand=x/y", "must not start with '-'"),
            ("-oProxyCommand=x:y", "must not start with '-'"),
            ("ssh://127.0.0.1%00@github.com/x", "control characters"),
        ];
        let open = every_scheme();
        for (url, why) in cases {
            // Never a name that would leave the host to resolve.
            if let Ok(Remote::Network {
                host: Host::Name(name),
                ..
            }) = parse(url)
            {
                assert!(is_localhost(&name), "{url} would be resolved as {name}");
            }
            let refused = check(&open, url).await.unwrap_err();
            assert!(
                matches!(
                    refused,
                    AgentError::PermissionDenied(_) | AgentError::InvalidArgument(_)
                ),
                "{url}: {refused:?}"
            );
            assert!(refused.to_string().contains(why), "{url}: {refused}");
            if let AgentError::PermissionDenied(message) = refused {
                assert!(
                    message.contains("KANDEV_ALLOW_INTERNAL_REPOSITORY_HOSTS=true"),
                    "{url}: {message}"
                );
            }
        }
    }

    #[tokio::test]
    async fn public_addresses_in_any_form_are_accepted() {
        let open = every_scheme();
        let cases = [
            ("https://140.82.112.3/org/repo.git", "https"),
            ("https://203.0.114.1/x", "https"),
            ("https://134744072/x", "https"),
            ("https://[2606:4700::1111]/x", "https"),
            ("https://[::ffff:8.8.8.8]/x", "https"),
            ("https://[2002:808:808::1]/x", "https"),
            ("https://[64:ff9b::808:808]/x", "https"),
            ("ssh://git@1.1.1.1:2222/x", "ssh"),
            ("git@[2606:4700::1111]:org/repo.git", "ssh"),
            ("git+ssh://1.1.1.1/x", "ssh"),
        ];
        for (url, protocol) in cases {
            // Addresses are not resolved, so nothing is pinned.
            assert_eq!(
                check(&open, url).await.unwrap(),
                [format!("protocol.{protocol}.allow=always")],
                "{url}"
            );
        }
        // The same host on a scheme the operator did not allow.
        let refused = check(&settings(vec![]), "http://1.1.1.1/x")
            .await
            .unwrap_err();
        assert!(matches!(refused, AgentError::PermissionDenied(_)));
        // An operator can open internal hosts (a self-hosted forge).
        let internal = Settings {
            allow_internal_repository_hosts: true,
            ..Settings::default()
        };
        assert!(check(&internal, "https://10.0.0.5/x").await.is_ok());
        assert!(check(&internal, "https://forge.localhost/x").await.is_ok());
    }

    /// `localhost` resolves (from /etc/hosts, never over the network) to
    /// loopback, and a resolved name is refused when any of its addresses
    /// is internal or when it has none.
    #[tokio::test]
    async fn names_resolving_to_internal_addresses_are_refused() {
        let resolved = resolve("localhost", 443).await.unwrap();
        let refused = check_resolved("localhost", &resolved).unwrap_err();
        assert!(matches!(refused, AgentError::PermissionDenied(_)));
        assert!(
            refused
                .to_string()
                .contains("resolves to 127.0.0.1, a loopback address")
                || refused
                    .to_string()
                    .contains("resolves to ::1, a loopback address"),
            "{refused}"
        );
        let refused = check(&settings(vec![]), "https://localhost/x")
            .await
            .unwrap_err();
        assert!(
            refused.to_string().contains("localhost is a loopback"),
            "{refused}"
        );

        let public: IpAddr = "140.82.112.3".parse().unwrap();
        let mixed = [public, "10.0.0.7".parse().unwrap()];
        let refused = check_resolved("forge.example", &mixed).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "repository host forge.example resolves to 10.0.0.7, a private address; \
             set KANDEV_ALLOW_INTERNAL_REPOSITORY_HOSTS=true to allow internal hosts"
        );
        let none = check_resolved("forge.example", &[]).unwrap_err();
        assert!(matches!(none, AgentError::PermissionDenied(_)));
        assert!(none.to_string().contains("does not resolve"), "{none}");
        assert_eq!(
            check_resolved("forge.example", &[public]).unwrap(),
            [public]
        );
    }

    #[tokio::test]
    async fn local_repositories_only_under_a_root() {
        let root = tempfile::tempdir().unwrap();
        let repo = root.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        let open = settings(vec![root.path().display().to_string()]);
        let closed = settings(vec![]);

        let url = format!("file://{}", repo.display());
        assert_eq!(
            check(&open, &url).await.unwrap(),
            ["protocol.file.allow=always"]
        );
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
        for escape in [
            format!("{}/../../etc", repo.display()),
            // git decodes file:// URLs: this is `<root>/../../etc`.
            format!("file://{}/%2e%2e/%2e%2e/etc", root.path().display()),
            format!("{}/not-yet/../../etc", root.path().display()),
        ] {
            assert!(check(&open, &escape).await.is_err(), "{escape}");
        }
        let link = root.path().join("link");
        std::os::unix::fs::symlink("/etc", &link).unwrap();
        assert!(check(&open, &link.display().to_string()).await.is_err());
    }

    /// A refusal names the roots a person may pick from, or says that
    /// there are none.
    #[tokio::test]
    async fn a_refused_local_repository_names_the_roots() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let roots = vec![
            a.path().display().to_string(),
            b.path().display().to_string(),
        ];
        let open = settings(roots.clone());
        let refused = check(&open, "/etc").await.unwrap_err();
        assert!(matches!(refused, AgentError::PermissionDenied(_)));
        assert_eq!(
            refused.to_string(),
            format!(
                "/etc is outside the repositories Kandev may use: {}, {}",
                roots[0], roots[1]
            )
        );
        let relative = check(&open, "repo").await.unwrap_err();
        assert_eq!(
            relative.to_string(),
            format!(
                "repo is not an absolute path; Kandev may use the repositories under: {}, {}",
                roots[0], roots[1]
            )
        );
        let none = check(&settings(vec![]), "file:///srv/git/x")
            .await
            .unwrap_err();
        assert!(
            none.to_string()
                .contains("Kandev may use none: no repository roots are set"),
            "{none}"
        );
    }

    /// The check before a task is taken reads the URL, never the network:
    /// a name is not resolved, an internal host as written is refused.
    #[test]
    fn the_offline_check_reads_only_the_url() {
        let closed = settings(vec![]);
        for url in [
            "https://github.com/org/repo.git",
            "git@github.com:org/repo.git",
            // Would not resolve; only the launch's check asks.
            "https://kandev-no-such-host.invalid/x.git",
        ] {
            assert!(
                matches!(check_offline(&closed, url), Ok(Remote::Network { .. })),
                "{url}"
            );
        }
        for url in [
            "https://127.0.0.1/x",
            "https://localhost/x",
            "http://[::1]/x",
            "ftp://github.com/x",
            "/srv/git/x",
        ] {
            let refused = check_offline(&closed, url).unwrap_err();
            assert!(matches!(refused, AgentError::PermissionDenied(_)), "{url}");
        }
        assert!(matches!(
            check_offline(&closed, "ext::sh -c id"),
            Err(AgentError::InvalidArgument(_))
        ));
        let internal = Settings {
            allow_internal_repository_hosts: true,
            ..Settings::default()
        };
        assert!(check_offline(&internal, "https://127.0.0.1/x").is_ok());
    }

    #[test]
    fn git_gets_only_what_was_checked() {
        let args = protocol_args(&["protocol.https.allow=always".into()]);
        assert_eq!(
            args,
            [
                "-c",
                "protocol.allow=never",
                "-c",
                "http.followRedirects=false",
                "-c",
                "submodule.recurse=false",
                "-c",
                "fetch.recurseSubmodules=false",
                "-c",
                "push.recurseSubmodules=no",
                "-c",
                "protocol.https.allow=always",
            ]
        );
        let addrs = [
            "140.82.112.3".parse().unwrap(),
            "2606:4700::1111".parse().unwrap(),
        ];
        assert_eq!(
            curl_resolve("github.com", 443, &addrs),
            "http.curloptResolve=github.com:443:140.82.112.3,[2606:4700::1111]"
        );
    }

    #[test]
    fn ssh_is_pinned_to_the_checked_address_under_its_name() {
        let addrs: [IpAddr; 2] = [
            "140.82.112.3".parse().unwrap(),
            "2606:4700::1111".parse().unwrap(),
        ];
        assert_eq!(
            ssh_pin("github.com", 22, &addrs).unwrap(),
            "core.sshCommand=ssh -o 'HostName=140.82.112.3' -o 'HostKeyAlias=github.com'"
        );
        // IPv6 without brackets; off port 22 the alias is known_hosts' form.
        assert_eq!(
            ssh_pin("git.example.", 2222, &addrs[1..]).unwrap(),
            "core.sshCommand=ssh -o 'HostName=2606:4700::1111' \
             -o 'HostKeyAlias=[git.example.]:2222'"
        );
        assert_eq!(
            ssh_pin("a-b_c.example", 22, &addrs[..1]).unwrap(),
            "core.sshCommand=ssh -o 'HostName=140.82.112.3' -o 'HostKeyAlias=a-b_c.example'"
        );
        // Nothing the shell could read otherwise is ever written.
        for odd in [
            "",
            "-oProxyCommand=x",
            "a'b",
            "a;id",
            "$(id)",
            "a b",
            "`id`",
            "a\nb",
            "é.example",
        ] {
            assert_eq!(ssh_pin(odd, 22, &addrs), None, "{odd:?}");
        }
        assert_eq!(ssh_pin("github.com", 22, &[]), None);
        // Names reach ssh_pin only through plain_host, which refuses the odd.
        for odd in ["ssh://a'b/x", "ssh://a%27b/x", "a;b:x", "ssh://a%24(id)/x"] {
            assert!(parse(odd).is_err(), "{odd}");
        }
    }

    /// A git command with its config and environment to itself: no system
    /// or user config, no proxy, no prompt.
    fn git(args: Vec<String>) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new("git");
        cmd.args(args)
            .env_remove("GIT_SSH_COMMAND")
            .env_remove("GIT_SSH")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("NO_PROXY", "*")
            .env("no_proxy", "*");
        for proxy in [
            "http_proxy",
            "https_proxy",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "all_proxy",
        ] {
            cmd.env_remove(proxy);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// Answers every request with `response`, until aborted.
    fn serve(listener: tokio::net::TcpListener, response: String) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = socket.write_all(response.as_bytes()).await;
                let _ = socket.shutdown().await;
            }
        })
    }

    /// A server on 127.0.0.1 redirects to another; with the arguments
    /// `check` and `protocol_args` give, git never connects to the second,
    /// where plain git does.
    #[tokio::test]
    async fn git_does_not_follow_a_redirect() {
        let first = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        target.set_nonblocking(true).unwrap();
        let target_port = target.local_addr().unwrap().port();
        let url = format!("http://{}/repo.git", first.local_addr().unwrap());
        let redirect = format!(
            "HTTP/1.1 301 Moved Permanently\r\nLocation: \
             http://127.0.0.1:{target_port}/repo.git/info/refs?service=git-upload-pack\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n"
        );
        let server = serve(first, redirect);
        let internal = Settings {
            allowed_repository_schemes: vec!["http".into()],
            allow_internal_repository_hosts: true,
            ..Settings::default()
        };

        let mut args = protocol_args(&check(&internal, &url).await.unwrap());
        args.extend(["ls-remote".into(), "--".into(), url.clone()]);
        // Bounded: a git that followed would wait on the target forever.
        let out = tokio::time::timeout(Duration::from_secs(30), git(args).output()).await;
        assert!(
            matches!(target.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "git followed the redirect"
        );
        let out = out.expect("git ends").unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("301"), "{stderr}");

        // The control: without them git follows the redirect.
        let target = tokio::net::TcpListener::from_std(target).unwrap();
        let plain = vec![
            "-c".into(),
            "protocol.http.allow=always".into(),
            "ls-remote".into(),
            "--".into(),
            url,
        ];
        let mut child = git(plain).spawn().unwrap();
        let (socket, _) = tokio::time::timeout(Duration::from_secs(30), target.accept())
            .await
            .expect("git follows the redirect")
            .unwrap();
        // Closed unanswered, so git ends.
        drop(socket);
        child.wait().await.unwrap();
        server.abort();
    }

    /// The pinned addresses reach git: `localhost` pinned to 127.0.0.2 is
    /// reached there, not at its own 127.0.0.1.
    #[tokio::test]
    async fn git_connects_to_the_pinned_address() {
        let pinned = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
        let port = pinned.local_addr().unwrap().port();
        let (seen, mut got) = tokio::sync::mpsc::unbounded_channel();
        let server = tokio::spawn(async move {
            while let Ok((socket, _)) = pinned.accept().await {
                let _ = seen.send(());
                drop(socket);
            }
        });
        // What `check` pins for the name as the URL writes it.
        for written in ["localhost", "LocalHost."] {
            let url = format!("http://{written}:{port}/repo.git");
            let Remote::Network {
                host: Host::Name(name),
                ..
            } = parse(&url).unwrap()
            else {
                panic!("{url} names no host");
            };
            let pin = curl_resolve(&name, port, &["127.0.0.2".parse().unwrap()]);
            let mut args = protocol_args(&["protocol.http.allow=always".into(), pin]);
            args.extend(["ls-remote".into(), "--".into(), url.clone()]);
            let out = git(args).output().await.unwrap();
            assert!(!out.status.success());
            let mut reached = 0;
            while got.try_recv().is_ok() {
                reached += 1;
            }
            assert!(reached > 0, "{url} did not reach 127.0.0.2");
        }
        server.abort();
    }

    /// The ssh pin reaches ssh: git runs `core.sshCommand` through the
    /// shell, and a fake `ssh` first on PATH (for this command only)
    /// records the words it gets, so no ssh ever connects.
    #[tokio::test]
    async fn git_runs_ssh_with_the_pinned_address() {
        let dir = tempfile::tempdir().unwrap();
        let seen = dir.path().join("args");
        let fake = dir.path().join("ssh");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\nexit 1\n",
                seen.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!(
            "{}:{}",
            dir.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let addrs: [IpAddr; 1] = ["192.0.2.10".parse().unwrap()];
        for (url, port, alias) in [
            ("ssh://example.invalid/x", 22, "example.invalid"),
            ("git@example.invalid:x", 22, "example.invalid"),
            (
                "ssh://git@example.invalid:2222/x",
                2222,
                "[example.invalid]:2222",
            ),
        ] {
            let _ = std::fs::remove_file(&seen);
            let pin = ssh_pin("example.invalid", port, &addrs).unwrap();
            let mut args = protocol_args(&["protocol.ssh.allow=always".into(), pin]);
            args.extend(["ls-remote".into(), "--".into(), url.into()]);
            let mut cmd = git(args);
            cmd.env("PATH", &path);
            let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
                .await
                .expect("git ends")
                .unwrap();
            assert!(!out.status.success());
            let words = std::fs::read_to_string(&seen).unwrap_or_default();
            let words: Vec<&str> = words.lines().collect();
            assert_eq!(
                words[..4],
                [
                    "-o",
                    "HostName=192.0.2.10",
                    "-o",
                    &format!("HostKeyAlias={alias}")
                ],
                "{url}: {words:?}"
            );
            assert!(
                words.iter().any(|w| w.ends_with("example.invalid")),
                "{url}: {words:?}"
            );
            if port != 22 {
                assert!(words.windows(2).any(|w| w == ["-p", "2222"]), "{words:?}");
            }
        }
        // The documented limit: GIT_SSH_COMMAND wins over core.sshCommand.
        let _ = std::fs::remove_file(&seen);
        let pin = ssh_pin("example.invalid", 22, &addrs).unwrap();
        let mut args = protocol_args(&["protocol.ssh.allow=always".into(), pin]);
        args.extend([
            "ls-remote".into(),
            "--".into(),
            "ssh://example.invalid/x".into(),
        ]);
        let mut cmd = git(args);
        cmd.env("PATH", &path).env("GIT_SSH_COMMAND", "ssh");
        let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
            .await
            .expect("git ends")
            .unwrap();
        assert!(!out.status.success());
        let words = std::fs::read_to_string(&seen).unwrap();
        assert!(!words.contains("HostName"), "{words}");
        assert!(words.contains("example.invalid"), "{words}");
    }
}
