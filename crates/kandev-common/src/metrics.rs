//! Prometheus metrics: one recorder per process (the `metrics` facade with
//! its Prometheus exporter), `GET /metrics` on every service's HTTP port,
//! request counts and latencies per route and RPC, and the process's own
//! RSS, open file descriptors and CPU time read at each scrape.
//!
//! Names follow Prometheus conventions: `kandev_` for Kandev's own,
//! `_total` for counters, base units (`_seconds`, `_bytes`).

use std::{
    collections::HashSet,
    sync::{LazyLock, OnceLock},
    time::{Duration, Instant},
};

use axum::{
    Router,
    extract::{MatchedPath, Request},
    http::{HeaderMap, Method, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::get,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use prost::Message as _;

/// Buckets for request and work latencies, in seconds.
const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 300.0,
];

/// Buckets for batch sizes (messages per batch).
const SIZE_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process's recorder (once; later calls return the same
/// handle), labelling every series with `service`, and starts its upkeep.
/// Call from within the Tokio runtime.
pub fn install(service: &'static str) -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new()
                .add_global_label("service", service)
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Suffix("_size".into()), SIZE_BUCKETS)
                })
                .map_err(|e| e.to_string())
                .and_then(|b| b.install_recorder().map_err(|e| e.to_string()));
            let handle = match handle {
                Ok(handle) => handle,
                // Another recorder is installed (a test harness): render an
                // empty registry rather than fail the service.
                Err(err) => {
                    tracing::warn!(%err, "cannot install the metrics recorder");
                    PrometheusBuilder::new().build_recorder().handle()
                }
            };
            describe();
            let upkeep = handle.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(5));
                loop {
                    tick.tick().await;
                    upkeep.run_upkeep();
                }
            });
            handle
        })
        .clone()
}

fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "http_requests_total",
        "HTTP and gRPC requests served, by method, route (or RPC) and status"
    );
    describe_histogram!(
        "http_request_duration_seconds",
        Unit::Seconds,
        "Time to answer a request, by method and route (or RPC)"
    );
    describe_gauge!(
        "process_resident_memory_bytes",
        Unit::Bytes,
        "Resident memory of the process"
    );
    describe_gauge!("process_open_fds", "Open file descriptors of the process");
    describe_counter!(
        "process_cpu_seconds_total",
        Unit::Seconds,
        "User and system CPU time of the process"
    );
}

/// `GET /metrics` in the Prometheus text format (version 0.0.4). With a
/// `token`, a scrape must send `Authorization: Bearer <token>` (the
/// gateway's port is public); without, it answers anyone who reaches the
/// port (the internal services' ports).
pub fn routes(service: &'static str, token: Option<String>) -> Router {
    let handle = install(service);
    Router::new().route(
        "/metrics",
        get(move |headers: HeaderMap| {
            let handle = handle.clone();
            let token = token.clone();
            async move {
                if let Some(token) = token
                    && !crate::service_auth::bearer_matches(&headers, &token)
                {
                    return StatusCode::UNAUTHORIZED.into_response();
                }
                record_process();
                (
                    [(
                        header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    handle.render(),
                )
                    .into_response()
            }
        }),
    )
}

/// Who may scrape `/metrics`.
#[derive(Debug, Clone)]
pub enum Scrape {
    /// Anyone who reaches the port (internal services).
    Open,
    /// Only with `Authorization: Bearer <token>`.
    Token(String),
    /// Not served (requests are still counted).
    Off,
}

/// `router` with every request counted and timed (see [`track`]) and
/// `/metrics` served as `scrape` says.
pub fn instrument(service: &'static str, router: Router, scrape: Scrape) -> Router {
    let router = match scrape {
        Scrape::Open => router.merge(routes(service, None)),
        Scrape::Token(token) => router.merge(routes(service, Some(token))),
        Scrape::Off => {
            install(service);
            router
        }
    };
    router.layer(middleware::from_fn(track))
}

/// Counts and times one request. Every label value comes from a fixed
/// set, whatever the request says (a made-up method or path must not add a
/// series: the registry keeps every series it ever saw): the method is one
/// of [`method_label`]'s, an HTTP request is labelled by its route template
/// (`unmatched` without one), a gRPC call by its RPC path only when it is a
/// method this port serves ([`rpc_label`]), and its gRPC status by code.
async fn track(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = method_label(request.method());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned());
    let rpc = is_grpc(request.headers()).then(|| rpc_label(request.uri().path(), route.is_some()));
    let response = next.run(request).await;
    let (route, status) = match rpc {
        Some(rpc) => (rpc.to_owned(), grpc_status_label(&response)),
        None => (
            route.unwrap_or_else(|| "unmatched".to_owned()),
            response.status().as_u16().to_string(),
        ),
    };
    if route != "/metrics" {
        metrics::histogram!("http_request_duration_seconds", "method" => method, "route" => route.clone())
            .record(started.elapsed().as_secs_f64());
        metrics::counter!("http_requests_total", "method" => method, "route" => route, "status" => status)
            .increment(1);
    }
    response
}

/// The `method` label: one of the methods the services answer, else
/// `other`.
pub fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// The gRPC methods a Kandev port can serve (`/package.Service/Method`):
/// every method of the descriptors compiled in, Kandev's own, the health
/// service's and reflection's. Known at build time, so bounded.
static KNOWN_RPCS: LazyLock<HashSet<String>> = LazyLock::new(|| {
    [
        kandev_proto::FILE_DESCRIPTOR_SET,
        tonic_health::pb::FILE_DESCRIPTOR_SET,
        tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET,
    ]
    .into_iter()
    .flat_map(rpc_paths)
    .collect()
});

/// The method paths of an encoded `FileDescriptorSet`.
fn rpc_paths(encoded: &[u8]) -> Vec<String> {
    let set = match prost_types::FileDescriptorSet::decode(encoded) {
        Ok(set) => set,
        Err(err) => {
            tracing::error!(%err, "cannot decode a compiled-in descriptor set");
            return Vec::new();
        }
    };
    let mut paths = Vec::new();
    for file in &set.file {
        for service in &file.service {
            let name = match file.package() {
                "" => service.name().to_owned(),
                package => format!("{package}.{}", service.name()),
            };
            for method in &service.method {
                paths.push(format!("/{name}/{}", method.name()));
            }
        }
    }
    paths
}

/// The `route` label of a gRPC call to `path`: the path itself when it is
/// a known method of a service this port serves (`served`: the router
/// matched it), else `unknown`.
pub fn rpc_label(path: &str, served: bool) -> &'static str {
    match KNOWN_RPCS.get(path) {
        Some(known) if served => known.as_str(),
        _ => "unknown",
    }
}

/// The `status` label of a gRPC answer: `grpc_<code>` for the 17 codes
/// (no `grpc-status` header: 0, as tonic sends it in the trailers), else
/// `grpc_unknown`.
fn grpc_status_label(response: &Response) -> String {
    let code = response.headers().get("grpc-status").map_or(Some(0), |v| {
        v.to_str().ok().and_then(|v| v.parse::<u8>().ok())
    });
    match code {
        Some(code) if code <= 16 => format!("grpc_{code}"),
        _ => "grpc_unknown".to_owned(),
    }
}
fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/grpc"))
}

/// Reads the process's RSS, open fds and CPU time from `/proc/self`
/// (Linux; elsewhere nothing is recorded).
fn record_process() {
    let page = 4096.0;
    if let Ok(statm) = std::fs::read_to_string("/proc/self/statm")
        && let Some(rss) = statm
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse::<f64>().ok())
    {
        metrics::gauge!("process_resident_memory_bytes").set(rss * page);
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        metrics::gauge!("process_open_fds").set(fds.count() as f64);
    }
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat")
        && let Some(after) = stat.rsplit_once(')').map(|(_, rest)| rest)
    {
        // Fields after the command name: state is 3rd; utime and stime are
        // the 14th and 15th of the whole line, 12th and 13th here.
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
        if let (Some(utime), Some(stime)) = (ticks(11), ticks(12)) {
            // USER_HZ is 100 on every Linux Kandev runs on.
            metrics::counter!("process_cpu_seconds_total").absolute((utime + stime) / 100);
        }
    }
}

/// Whether a scrape body parses as the Prometheus text format: every line
/// is a comment, blank, or `name{labels} value`. For tests and checks.
pub fn parse_text(body: &str) -> Result<Vec<Sample>, String> {
    let mut samples = Vec::new();
    for (n, line) in body.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .ok_or_else(|| format!("line {}: no value: {line}", n + 1))?;
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v
                .parse()
                .map_err(|_| format!("line {}: bad value: {line}", n + 1))?,
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => {
                let body = rest
                    .strip_suffix('}')
                    .ok_or_else(|| format!("line {}: unclosed labels: {line}", n + 1))?;
                (
                    name,
                    parse_labels(body).map_err(|e| format!("line {}: {e}", n + 1))?,
                )
            }
            None => (series, Vec::new()),
        };
        let name_ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            && !name.starts_with(|c: char| c.is_ascii_digit());
        if !name_ok {
            return Err(format!("line {}: bad metric name {name:?}", n + 1));
        }
        samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    Ok(samples)
}

fn parse_labels(body: &str) -> Result<Vec<(String, String)>, String> {
    let mut labels = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"").ok_or("a label without =\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, escaped)) = chars.next() {
                        value.push(match escaped {
                            'n' => '\n',
                            other => other,
                        });
                    }
                }
                '"' => {
                    end = Some(i);
                    break;
                }
                c => value.push(c),
            }
        }
        let end = end.ok_or("an unterminated label value")?;
        labels.push((key.trim_start_matches(',').to_owned(), value));
        rest = after[end + 1..].trim_start_matches(',');
    }
    Ok(labels)
}

/// One sample of a scrape.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    /// The value of label `key`, if any.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The metric names a crate's `metric_names.rs` (its `source`)
    /// declares (`pub const X: &str = "name";`) that `docs` has no table
    /// row for.
    fn undocumented<'a>(source: &'a str, docs: &str) -> Vec<&'a str> {
        source
            .lines()
            .filter_map(|line| {
                let line = line.trim();
                line.strip_prefix("pub const ")?;
                let (_, value) = line.split_once(": &str = \"")?;
                value.strip_suffix("\";")
            })
            .filter(|name| !docs.contains(&format!("| `{name}` |")))
            .collect()
    }

    /// Every metric a crate names in its `metric_names.rs` has a row in
    /// the operators' page.
    #[test]
    fn every_metric_is_documented_for_operators() {
        let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let docs = std::fs::read_to_string(crates.join("../docs/operations.md")).unwrap();
        let mut read = 0;
        for entry in std::fs::read_dir(&crates).unwrap() {
            let path = entry.unwrap().path().join("src/metric_names.rs");
            let Ok(source) = std::fs::read_to_string(&path) else {
                continue;
            };
            read += 1;
            let missing = undocumented(&source, &docs);
            assert!(
                missing.is_empty(),
                "{}: not in docs/operations.md: {missing:?}",
                path.display()
            );
        }
        assert!(
            read >= 5,
            "every service's metric_names.rs was read ({read})"
        );
    }

    #[test]
    fn a_metric_without_a_table_row_is_undocumented() {
        let source = "/// x\npub const A: &str = \"kandev_a_total\";\npub const B: &str = \"kandev_b\";\npub use other::C;\n";
        let docs = "| `kandev_a_total` | counter | | A. |\nkandev_b is mentioned in prose only\n";
        assert_eq!(undocumented(source, docs), ["kandev_b"]);
    }

    #[test]
    fn labels_come_from_fixed_sets() {
        assert_eq!(method_label(&Method::PATCH), "PATCH");
        for made_up in ["FOO", "GETT", "X1234", "CONNECT", "TRACE"] {
            let method = Method::from_bytes(made_up.as_bytes()).unwrap();
            assert_eq!(method_label(&method), "other", "{made_up}");
        }
        // Served and known; known but not served here; made up.
        assert_eq!(
            rpc_label("/kandev.v1.TaskService/CreateTask", true),
            "/kandev.v1.TaskService/CreateTask"
        );
        assert_eq!(
            rpc_label("/grpc.health.v1.Health/Check", true),
            "/grpc.health.v1.Health/Check"
        );
        assert_eq!(
            rpc_label("/kandev.v1.TaskService/CreateTask", false),
            "unknown"
        );
        assert_eq!(rpc_label("/kandev.v1.TaskService/Nope", true), "unknown");
        assert_eq!(rpc_label("/evil.Service/Method", true), "unknown");
        let status = |code: &str| {
            let mut response = Response::new(axum::body::Body::empty());
            response
                .headers_mut()
                .insert("grpc-status", code.parse().unwrap());
            grpc_status_label(&response)
        };
        assert_eq!(status("16"), "grpc_16");
        assert_eq!(status("17"), "grpc_unknown");
        assert_eq!(status("x"), "grpc_unknown");
    }

    #[test]
    fn the_text_format_parses_with_labels_and_escapes() {
        let body = "# HELP x a thing\n# TYPE x counter\nx_total{a=\"1\",b=\"q\\\"uote\"} 3\ny 1.5e3\nz_bucket{le=\"+Inf\"} 2\n";
        let samples = parse_text(body).unwrap();
        assert_eq!(samples.len(), 3);
        assert_eq!(samples[0].name, "x_total");
        assert_eq!(samples[0].label("b"), Some("q\"uote"));
        assert_eq!(samples[1].value, 1500.0);
        assert!(parse_text("bad line\n").is_err());
        assert!(parse_text("9bad 1\n").is_err());
    }
}
