//! Layered configuration.
//!
//! Every service loads its own typed settings the same way: the struct's
//! `Default`, then the TOML file named by `--config` or `KANDEV_CONFIG`, then
//! environment variables prefixed `KANDEV_` (so `database_url` is
//! `KANDEV_DATABASE_URL`; `__` nests, as in `KANDEV_LOG__FORMAT`). Key names
//! are shared between services, so one environment file can serve them all.

use std::path::{Path, PathBuf};

use figment::{
    Figment,
    providers::{Env, Format, Serialized, Toml},
};
use serde::{Serialize, de::DeserializeOwned};

/// The environment variable prefix shared by every service.
pub const ENV_PREFIX: &str = "KANDEV_";

/// Why configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration file {0} does not exist")]
    MissingFile(PathBuf),
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl From<figment::Error> for ConfigError {
    fn from(err: figment::Error) -> Self {
        ConfigError::Invalid(err.to_string())
    }
}

/// Settings that can check themselves once, after loading.
pub trait Validate {
    /// Returns a readable reason when the settings cannot work.
    fn validate(&self) -> Result<(), String> {
        Ok(())
    }
}

/// Loads settings: defaults, then `file` (or the file named by
/// `KANDEV_CONFIG`), then `KANDEV_*` variables; then validates them.
pub fn load<T>(file: Option<&Path>) -> Result<T, ConfigError>
where
    T: Serialize + DeserializeOwned + Default + Validate,
{
    load_from(figment_for::<T>(file)?)
}

/// The figment that [`load`] extracts from, for services that add layers
/// (command-line flags) on top.
pub fn figment_for<T: Serialize + Default>(file: Option<&Path>) -> Result<Figment, ConfigError> {
    figment_over(Figment::from(Serialized::defaults(T::default())), file)
}

/// The file and the `KANDEV_*` variables over `base`: a service's defaults,
/// with those of a way to run it on top (the `kandev` binary's data
/// directory, say), which the file and the environment still override.
pub fn figment_over(base: Figment, file: Option<&Path>) -> Result<Figment, ConfigError> {
    let mut figment = base;
    let env_file = Env::var("KANDEV_CONFIG").map(PathBuf::from);
    if let Some(path) = file.map(Path::to_path_buf).or(env_file) {
        if !path.is_file() {
            return Err(ConfigError::MissingFile(path));
        }
        figment = figment.merge(Toml::file(path));
    }
    Ok(figment.merge(Env::prefixed(ENV_PREFIX).ignore(&["config"]).split("__")))
}

/// Extracts and validates settings from a prepared figment.
pub fn load_from<T: DeserializeOwned + Validate>(figment: Figment) -> Result<T, ConfigError> {
    let settings: T = figment.extract()?;
    settings.validate().map_err(ConfigError::Invalid)?;
    Ok(settings)
}

#[cfg(test)]
// figment's Jail API returns its own large error type.
#[allow(clippy::result_large_err)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    struct Demo {
        listen_addr: String,
        database_url: String,
        log: crate::telemetry::LogSettings,
    }

    impl Default for Demo {
        fn default() -> Self {
            Demo {
                listen_addr: "127.0.0.1:1".into(),
                database_url: "postgres://default".into(),
                log: Default::default(),
            }
        }
    }

    impl Validate for Demo {
        fn validate(&self) -> Result<(), String> {
            if self.listen_addr.is_empty() {
                return Err("listen_addr must not be empty".into());
            }
            Ok(())
        }
    }

    #[test]
    fn layers_defaults_file_then_env() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "kandev.toml",
                "listen_addr = \"0.0.0.0:9\"\ndatabase_url = \"postgres://file\"\n",
            )?;
            jail.set_env("KANDEV_DATABASE_URL", "postgres://env");
            jail.set_env("KANDEV_LOG__FORMAT", "json");
            jail.set_env("KANDEV_LOG__OTLP_ENDPOINT", "http://collector:4317");
            let demo: Demo = load(Some(Path::new("kandev.toml"))).map_err(|e| e.to_string())?;
            assert_eq!(demo.listen_addr, "0.0.0.0:9");
            assert_eq!(demo.database_url, "postgres://env");
            assert_eq!(demo.log.format, crate::telemetry::LogFormat::Json);
            assert_eq!(demo.log.otlp_endpoint, "http://collector:4317");
            Ok(())
        });
    }

    #[test]
    fn config_file_from_env_and_validation() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("other.toml", "listen_addr = \"\"\n")?;
            jail.set_env("KANDEV_CONFIG", "other.toml");
            let err = load::<Demo>(None).unwrap_err();
            assert!(
                err.to_string().contains("listen_addr must not be empty"),
                "{err}"
            );
            Ok(())
        });
    }

    #[test]
    fn missing_file_is_an_error() {
        figment::Jail::expect_with(|_| {
            let err = load::<Demo>(Some(Path::new("nope.toml"))).unwrap_err();
            assert!(matches!(err, ConfigError::MissingFile(_)));
            Ok(())
        });
    }

    #[test]
    fn malformed_value_is_a_clear_error() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("KANDEV_LOG__FORMAT", "xml");
            let err = load::<Demo>(None).unwrap_err();
            // The message names the key and the accepted values.
            let text = err.to_string().to_lowercase();
            assert!(
                text.contains("log.format") && text.contains("json"),
                "{err}"
            );
            Ok(())
        });
    }
}
