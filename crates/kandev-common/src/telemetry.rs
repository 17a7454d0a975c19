//! Tracing setup shared by every binary: log lines (human or JSON) and
//! spans that carry W3C trace context (see [`crate::trace`]), exported over
//! OTLP when an endpoint is configured.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::{Resource, trace::SdkTracerProvider};
use serde::{Deserialize, Serialize};
use tracing_subscriber::{EnvFilter, fmt, layer::SubscriberExt, util::SubscriberInitExt};

/// Output format of log lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Pretty,
    /// One JSON object per line, for log shippers.
    Json,
}

/// Logging and tracing settings (`KANDEV_LOG__FORMAT`, `KANDEV_LOG__FILTER`,
/// `KANDEV_LOG__OTLP_ENDPOINT`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LogSettings {
    pub format: LogFormat,
    /// An `EnvFilter` directive; `RUST_LOG`, when set, wins.
    pub filter: String,
    /// An OpenTelemetry collector's OTLP/gRPC endpoint
    /// (`http://collector:4317`): spans are exported there. Empty (the
    /// default): nothing is exported; trace context is still propagated and
    /// logged.
    pub otlp_endpoint: String,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            format: LogFormat::Pretty,
            filter: "info".into(),
            otlp_endpoint: String::new(),
        }
    }
}

/// Keeps span export running; dropping it flushes the spans not yet sent.
#[must_use = "dropping it stops span export"]
#[derive(Debug)]
pub struct Telemetry {
    exporting: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.exporting.take()
            && let Err(err) = provider.shutdown()
        {
            eprintln!("span export did not flush: {err}");
        }
    }
}

/// Installs the global subscriber for `service`. Calling it twice keeps the
/// first one, so tests can call it freely. With an OTLP endpoint, call it
/// within the Tokio runtime (the exporter's connection lives there).
pub fn init(service: &'static str, settings: &LogSettings) -> Telemetry {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&settings.filter))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let mut provider = SdkTracerProvider::builder()
        .with_resource(Resource::builder().with_service_name(service).build());
    let endpoint = settings.otlp_endpoint.trim();
    let mut export_error = None;
    if !endpoint.is_empty() {
        match opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .build()
        {
            Ok(exporter) => provider = provider.with_batch_exporter(exporter),
            Err(err) => export_error = Some(err.to_string()),
        }
    }
    let provider = provider.build();
    // Always installed: without it no span has a trace id to pass on.
    let spans = tracing_opentelemetry::layer().with_tracer(provider.tracer(service));
    let registry = tracing_subscriber::registry().with(filter).with(spans);
    let installed = match settings.format {
        LogFormat::Pretty => registry
            .with(fmt::layer().with_writer(std::io::stderr))
            .try_init(),
        LogFormat::Json => registry
            .with(fmt::layer().json().with_writer(std::io::stderr))
            .try_init(),
    }
    .is_ok();
    let exporting = installed && !endpoint.is_empty() && export_error.is_none();
    if let Some(err) = export_error {
        tracing::error!(%endpoint, %err, "cannot export spans over OTLP; tracing stays local");
    } else if exporting {
        tracing::info!(%endpoint, "exporting spans over OTLP");
    }
    Telemetry {
        exporting: exporting.then_some(provider),
    }
}
