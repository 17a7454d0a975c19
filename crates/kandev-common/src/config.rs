//! Layered configuration.
//!
//! Every service loads its own typed settings the same way: the struct's
//! `Default`, then the TOML file named by `--config` or `KANDEV_CONFIG`, then
//! environment variables prefixed `KANDEV_` (so `database_url` is
//! `KANDEV_DATABASE_URL`; `__` nests, as in `KANDEV_LOG__FORMAT`). Key names
//! are shared between services, so one environment file can serve them all.
//!
//! A list setting (one whose default is a list) takes, in its variable, one
//! value (`KANDEV_ALLOWED_REPOSITORY_ROOTS=/srv/git`), a comma-separated
//! list (`/srv/git,/home/git`) or TOML list syntax (`["/srv/git"]`, the
//! only way to give an item with a comma in it). Other settings are read
//! as they are.
//!
//! The settings every service has are [`ServiceSettings`], flattened into
//! each service's own.

use std::path::{Path, PathBuf};

use figment::{
    Figment, Metadata, Profile, Provider,
    providers::{Env, Format, Serialized, Toml},
    value::{Dict, Map, Value},
};
use serde::{Serialize, de::DeserializeOwned};

mod service;

pub use service::{NatsPassword, ServiceConfig, ServiceSettings, check_nats_credentials};

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

/// Checks what every service's settings share: the address it listens on
/// and its database (a `postgres://` or `sqlite:` URL, a lower-case
/// schema name, at least one connection).
pub fn check_listen_and_database(
    listen_addr: &str,
    database_url: &str,
    database_schema: &str,
    max_connections: u32,
) -> Result<(), String> {
    listen_addr
        .parse::<std::net::SocketAddr>()
        .map_err(|e| format!("listen_addr {listen_addr:?}: {e}"))?;
    if !["postgres://", "postgresql://", "sqlite:"]
        .iter()
        .any(|scheme| database_url.starts_with(scheme))
    {
        return Err("database_url must be a postgres:// or a sqlite: URL".into());
    }
    let schema_ok = !database_schema.is_empty()
        && database_schema
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !schema_ok {
        return Err("database_schema must be lower-case letters, digits and _".into());
    }
    if max_connections == 0 {
        return Err("database_max_connections must be at least 1".into());
    }
    Ok(())
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
    let env = EnvVars {
        env: Env::prefixed(ENV_PREFIX).ignore(&["config"]).split("__"),
        shape: figment.clone(),
    };
    Ok(figment.merge(env))
}

/// The `KANDEV_*` variables, read as [`Env`] reads them, except that a
/// variable whose setting is a list in `shape` (the layers under it) may
/// also hold one value or a comma-separated list.
struct EnvVars {
    env: Env,
    shape: Figment,
}

impl Provider for EnvVars {
    fn metadata(&self) -> Metadata {
        self.env.metadata()
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        // The layers under the variables, merged once (a file that does not
        // parse has no lists here; its error comes with the extraction).
        let shape: Option<Value> = self.shape.extract().ok();
        let mut dict = Dict::new();
        for (key, raw) in self.env.iter() {
            let setting = shape.as_ref().and_then(|s| s.find_ref(key.as_str()));
            let is_list = matches!(setting, Some(Value::Array(..)));
            let value = if is_list {
                list_value(&raw)
            } else {
                raw.parse()
                    .expect("parsing an environment value is infallible")
            };
            let path: Vec<&str> = key.as_str().split('.').collect();
            insert(&mut dict, &path, value);
        }
        Ok(self.env.profile.collect(dict))
    }
}

/// A list setting's value: TOML list syntax as it is; otherwise the
/// comma-separated items, each a string (none for an empty value).
fn list_value(raw: &str) -> Value {
    if raw.trim_start().starts_with('[') {
        return raw
            .parse()
            .expect("parsing an environment value is infallible");
    }
    let items: Vec<Value> = raw
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(Value::from)
        .collect();
    Value::from(items)
}

/// Puts `value` at the dotted `path` in `dict`, making the dictionaries on
/// the way (a later variable wins over an earlier one at the same path).
fn insert(dict: &mut Dict, path: &[&str], value: Value) {
    match path {
        [] => {}
        [last] => {
            dict.insert((*last).to_string(), value);
        }
        [first, rest @ ..] => {
            let entry = dict
                .entry((*first).to_string())
                .or_insert_with(|| Value::from(Dict::new()));
            if !matches!(entry, Value::Dict(..)) {
                *entry = Value::from(Dict::new());
            }
            if let Value::Dict(_, inner) = entry {
                insert(inner, rest, value);
            }
        }
    }
}

/// `err` with the key it is about. serde reads a flattened struct
/// ([`ServiceSettings`]) from a copy of the values, which loses the key of a
/// malformed one (and where it came from): extracting the shared settings
/// alone finds it again.
fn keyed(figment: &Figment, err: figment::Error) -> figment::Error {
    if !err.path.is_empty() {
        return err;
    }
    match figment.extract::<ServiceSettings>() {
        Err(keyed) if !keyed.path.is_empty() => keyed,
        _ => err,
    }
}

/// Extracts and validates settings from a prepared figment.
pub fn load_from<T: DeserializeOwned + Validate>(figment: Figment) -> Result<T, ConfigError> {
    let settings: T = figment.extract().map_err(|err| keyed(&figment, err))?;
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

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    struct Lists {
        roots: Vec<String>,
        schemes: Vec<String>,
        database_url: String,
        port: u16,
        log: crate::telemetry::LogSettings,
    }

    impl Default for Lists {
        fn default() -> Self {
            Lists {
                roots: vec![],
                schemes: vec!["https".into()],
                database_url: "postgres://default".into(),
                port: 1,
                log: Default::default(),
            }
        }
    }

    impl Validate for Lists {}

    /// `roots` from `KANDEV_ROOTS=<raw>`.
    fn roots_from(raw: &str) -> Result<Vec<String>, ConfigError> {
        let mut out = Err(ConfigError::Invalid("not run".into()));
        figment::Jail::expect_with(|jail| {
            jail.set_env("KANDEV_ROOTS", raw);
            out = load::<Lists>(None).map(|l| l.roots);
            Ok(())
        });
        out
    }

    #[test]
    fn a_list_setting_takes_one_value() {
        assert_eq!(roots_from("/srv/git").unwrap(), ["/srv/git"]);
    }

    #[test]
    fn a_list_setting_takes_a_comma_separated_list() {
        assert_eq!(roots_from("/a,/b").unwrap(), ["/a", "/b"]);
        assert_eq!(roots_from(" /a , /b ,").unwrap(), ["/a", "/b"]);
        // Items stay strings, whatever they look like.
        assert_eq!(roots_from("8080,true").unwrap(), ["8080", "true"]);
        assert!(roots_from("").unwrap().is_empty());
    }

    #[test]
    fn a_list_setting_takes_toml_list_syntax() {
        assert_eq!(roots_from(r#"["/a", "/b"]"#).unwrap(), ["/a", "/b"]);
        assert_eq!(roots_from(r#"["/a,b"]"#).unwrap(), ["/a,b"]);
    }

    #[test]
    fn lists_from_a_file_and_non_list_settings_are_read_as_before() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("kandev.toml", "schemes = [\"ssh\", \"file\"]\n")?;
            jail.set_env("KANDEV_DATABASE_URL", "postgres://a,b");
            jail.set_env("KANDEV_PORT", "8080");
            jail.set_env("KANDEV_LOG__FORMAT", "json");
            let lists: Lists = load(Some(Path::new("kandev.toml"))).map_err(|e| e.to_string())?;
            assert_eq!(lists.schemes, ["ssh", "file"]);
            assert_eq!(lists.database_url, "postgres://a,b");
            assert_eq!(lists.port, 8080);
            assert_eq!(lists.log.format, crate::telemetry::LogFormat::Json);
            jail.set_env("KANDEV_SCHEMES", "git");
            let lists: Lists = load(Some(Path::new("kandev.toml"))).map_err(|e| e.to_string())?;
            assert_eq!(lists.schemes, ["git"], "the variable over the file");
            jail.set_env("KANDEV_PORT", "80,81");
            let err = load::<Lists>(None).unwrap_err().to_string();
            assert!(
                err.contains("PORT") && err.contains("80,81"),
                "a number stays a number: {err}"
            );
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
