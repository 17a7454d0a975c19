//! Choosing the `authenticate` method from the credentials in the agent's
//! environment.
//!
//! An agent that answers `session/new` with `auth_required` (-32000) lists
//! its methods in `initialize`'s `authMethods`. Many of them only read an
//! API key from the agent's environment (codex-acp's `openai-api-key`,
//! Gemini's `gemini-api-key`): the client may call `authenticate` with such
//! a method by itself when that variable is set. A method's variables are
//! taken from, in order:
//! - its `vars` (`{"type":"env_var","vars":[{"name":…}]}`, newer agents),
//! - a table of known method ids ([`KNOWN_AUTH_ENV`], or the client's own),
//! - variable-like words in its id, name or description (`Use
//!   OPENAI_API_KEY`, "Requires setting the `GEMINI_API_KEY` environment
//!   variable").
//!
//! Terminal methods are never sent to `authenticate`; methods that name no
//! variable (a browser login) are used only when explicitly allowed.

use std::collections::BTreeSet;

use serde_json::Value;

/// Method ids of known agents and a variable each reads (one of them set is
/// enough when an id is listed more than once).
pub const KNOWN_AUTH_ENV: &[(&str, &str)] = &[
    // codex-acp (zed-industries, 0.x).
    ("openai-api-key", "OPENAI_API_KEY"),
    ("codex-api-key", "CODEX_API_KEY"),
    // @agentclientprotocol/codex-acp.
    ("api-key", "CODEX_API_KEY"),
    ("api-key", "OPENAI_API_KEY"),
    // Gemini CLI.
    ("gemini-api-key", "GEMINI_API_KEY"),
];

/// [`KNOWN_AUTH_ENV`] as owned pairs, the default of
/// [`crate::ClientOptions::auth_method_env`].
pub fn known_auth_env() -> Vec<(String, String)> {
    KNOWN_AUTH_ENV
        .iter()
        .map(|(id, var)| ((*id).to_owned(), (*var).to_owned()))
        .collect()
}

/// One advertised auth method, as far as choosing it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthMethodInfo {
    /// The method id (what `authenticate` takes).
    pub id: String,
    /// A terminal method: never sent to `authenticate`.
    pub terminal: bool,
    /// The environment variables it reads, any one of which is enough.
    pub env: Vec<String>,
}

/// The methods of `initialize`'s raw `authMethods` (entries without an id
/// are skipped), with their variables looked up in `table` too.
pub fn methods(auth_methods: &Value, table: &[(String, String)]) -> Vec<AuthMethodInfo> {
    let Some(list) = auth_methods.as_array() else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|method| {
            let id = method.get("id")?.as_str()?.to_owned();
            let terminal = method.get("type").and_then(Value::as_str) == Some("terminal");
            let env = method_env(method, &id, table);
            Some(AuthMethodInfo { id, terminal, env })
        })
        .collect()
}

fn method_env(method: &Value, id: &str, table: &[(String, String)]) -> Vec<String> {
    let declared = method
        .get("vars")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.get("name").and_then(Value::as_str));
    let known = table
        .iter()
        .filter(|(k, _)| k == id)
        .map(|(_, v)| v.as_str());
    let text = ["id", "name", "description"]
        .into_iter()
        .filter_map(|key| method.get(key).and_then(Value::as_str))
        .flat_map(env_words);
    let mut env: Vec<String> = Vec::new();
    for var in declared.chain(known).chain(text) {
        if !env.iter().any(|e| e == var) {
            env.push(var.to_owned());
        }
    }
    env
}

/// The words of `text` that read as environment variable names: upper-case
/// letters, digits and `_`, with at least one inner `_` (`OPENAI_API_KEY`).
fn env_words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| {
            word.starts_with(|c: char| c.is_ascii_uppercase())
                && !word.ends_with('_')
                && word.contains('_')
                && word
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        })
}

/// The method to authenticate with: the first non-terminal one (in the
/// agent's order) that is explicitly `allowed` or reads a variable in
/// `env_present`. Without one, the variables any of which would have
/// made a method usable (empty when no method names one).
pub fn choose(
    methods: &[AuthMethodInfo],
    allowed: &[String],
    env_present: &BTreeSet<String>,
) -> Result<String, Vec<String>> {
    let usable = methods.iter().filter(|m| !m.terminal);
    if let Some(method) = usable
        .clone()
        .find(|m| allowed.contains(&m.id) || m.env.iter().any(|var| env_present.contains(var)))
    {
        return Ok(method.id.clone());
    }
    let mut missing: Vec<String> = Vec::new();
    for var in usable.flat_map(|m| &m.env) {
        if !missing.contains(var) {
            missing.push(var.clone());
        }
    }
    Err(missing)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// codex-acp's methods: the newer `env_var` shape, and the older one
    /// that names the variable in its name only.
    fn codex() -> Value {
        json!([
            {"id": "chatgpt", "name": "Login with ChatGPT",
             "description": "Use your ChatGPT login with Codex CLI (requires a paid ChatGPT subscription)"},
            {"type": "env_var", "id": "codex-api-key", "name": "Use CODEX_API_KEY",
             "vars": [{"name": "CODEX_API_KEY"}]},
            {"id": "openai-api-key", "name": "Use OPENAI_API_KEY"}
        ])
    }

    fn present(vars: &[&str]) -> BTreeSet<String> {
        vars.iter().map(|v| (*v).to_owned()).collect()
    }

    #[test]
    fn a_methods_variables_come_from_vars_the_table_and_its_words() {
        let got = methods(&codex(), &known_auth_env());
        let env: Vec<_> = got.iter().map(|m| (m.id.as_str(), m.env.clone())).collect();
        assert_eq!(
            env,
            [
                ("chatgpt", vec![]),
                ("codex-api-key", vec!["CODEX_API_KEY".to_owned()]),
                ("openai-api-key", vec!["OPENAI_API_KEY".to_owned()]),
            ]
        );
        let gemini = json!([{"id": "gemini-api-key", "name": "Use Gemini API key",
            "description": "Requires setting the `GEMINI_API_KEY` environment variable"}]);
        assert_eq!(methods(&gemini, &[])[0].env, ["GEMINI_API_KEY"]);
        // Known by id alone.
        let bare = json!([{"id": "openai-api-key", "name": "API key"}]);
        assert_eq!(methods(&bare, &known_auth_env())[0].env, ["OPENAI_API_KEY"]);
        let terminal = json!([{"type": "terminal", "id": "login", "name": "Log in"}]);
        assert!(methods(&terminal, &[])[0].terminal);
    }

    #[test]
    fn the_method_whose_variable_is_set_is_chosen() {
        let codex = methods(&codex(), &known_auth_env());
        assert_eq!(
            choose(&codex, &[], &present(&["OPENAI_API_KEY"])),
            Ok("openai-api-key".to_owned())
        );
        assert_eq!(
            choose(&codex, &[], &present(&["CODEX_API_KEY", "OPENAI_API_KEY"])),
            Ok("codex-api-key".to_owned())
        );
        // An explicitly allowed method needs no variable.
        assert_eq!(
            choose(&codex, &["chatgpt".to_owned()], &present(&[])),
            Ok("chatgpt".to_owned())
        );
    }

    #[test]
    fn without_a_variable_the_missing_ones_are_named() {
        let codex = methods(&codex(), &known_auth_env());
        assert_eq!(
            choose(&codex, &[], &present(&["ANTHROPIC_API_KEY"])),
            Err(vec![
                "CODEX_API_KEY".to_owned(),
                "OPENAI_API_KEY".to_owned()
            ])
        );
        // Terminal methods are never chosen, even when allowed.
        let terminal = methods(
            &json!([{"type": "terminal", "id": "login", "name": "Set LOGIN_TOKEN"}]),
            &[],
        );
        assert_eq!(
            choose(&terminal, &["login".to_owned()], &present(&["LOGIN_TOKEN"])),
            Err(vec![])
        );
    }
}
