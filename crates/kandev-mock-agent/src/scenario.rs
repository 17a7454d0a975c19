//! The scenario grammar: which script a prompt runs.
//!
//! A prompt's text is the concatenation of its `text` blocks. If a line of it
//! starts with `scenario:` the rest of that line is the command; otherwise the
//! first non-empty line is, when its first word names a scenario and its
//! arguments parse. Anything else runs the default scenario (`echo` unless
//! configured). A command is a name followed by whitespace-separated arguments.

use std::fmt;

/// One script. Arguments and defaults are listed in `docs/mock-agent.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scenario {
    /// Echo text back (the whole prompt when no text is given).
    Echo(String),
    /// A realistic coding turn that reads, edits and verifies one file.
    Code { file: String },
    /// Ask permission, then write the file or report the refusal.
    Permission { file: String },
    /// `count` message chunks of `size` bytes of text, as fast as possible,
    /// or paced at `rate` chunks per second when it is not 0.
    Flood { count: u64, size: usize, rate: u64 },
    /// `count` chunks with `delay_ms` between them.
    Slow { count: u64, delay_ms: u64 },
    /// Block until `session/cancel`.
    WaitCancel,
    /// Write a chunk, then exit with `code` in the middle of the turn.
    Crash { code: i32 },
    /// Non-JSON and invalid UTF-8 lines on stdout, then a normal end.
    Garbage,
    /// One line longer than `bytes`, then a normal end.
    Oversized { bytes: usize },
    /// Every `session/update` variant once.
    AllUpdates,
    /// Answer the prompt with a JSON-RPC error.
    Error { message: String },
    /// End the turn with the given stop reason.
    Stop { reason: String },
    /// Never answer (until stdin closes).
    Hang,
    /// Write lines to stderr, then end the turn.
    Stderr { lines: u64 },
    /// Say what the session was given: its mode, model, MCP servers
    /// (secret values as digests) and the prompt.
    SessionInfo,
    /// Describe the grammar.
    Help,
}

/// A prompt named a scenario explicitly (`scenario:`) but its arguments are wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseError(pub(crate) String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

pub(crate) const STOP_REASONS: [&str; 5] = [
    "end_turn",
    "max_tokens",
    "max_turn_requests",
    "refusal",
    "cancelled",
];

/// The scenario names and what they do, for `help` and `available_commands_update`.
pub(crate) const COMMANDS: [(&str, &str, &str); 16] = [
    ("echo", "Echo the text back", "text"),
    (
        "code",
        "Read, edit and verify a file (default README.md)",
        "file",
    ),
    (
        "permission",
        "Ask permission, then write a file (default permitted.txt)",
        "file",
    ),
    (
        "flood",
        "N chunks of SIZE bytes as fast as possible (default 1000 256)",
        "N SIZE",
    ),
    (
        "slow",
        "N chunks with MS milliseconds between them (default 10 100)",
        "N MS",
    ),
    (
        "wait-cancel",
        "Wait until session/cancel, then stop with cancelled",
        "",
    ),
    (
        "crash",
        "Write a chunk, then exit with CODE (default 1)",
        "CODE",
    ),
    (
        "garbage",
        "Write non-JSON lines to stdout, then end normally",
        "",
    ),
    (
        "oversized",
        "Write one line longer than BYTES (default 9000000)",
        "BYTES",
    ),
    ("all-updates", "Send every session/update variant", ""),
    (
        "error",
        "Answer the prompt with a JSON-RPC error",
        "message",
    ),
    ("stop", "End the turn with REASON", "REASON"),
    ("hang", "Never answer the prompt", ""),
    ("stderr", "Write N lines to stderr (default 3)", "N"),
    (
        "session-info",
        "Say the session's mode, model and MCP servers, and the prompt",
        "",
    ),
    ("help", "Describe the scenarios", ""),
];

fn arg<T: std::str::FromStr>(
    args: &[&str],
    i: usize,
    default: T,
    what: &str,
) -> Result<T, ParseError> {
    match args.get(i) {
        None => Ok(default),
        Some(raw) => raw
            .parse()
            .map_err(|_| ParseError(format!("{what}: `{raw}` is not a valid number"))),
    }
}

fn no_args(name: &str, args: &[&str]) -> Result<(), ParseError> {
    if args.is_empty() {
        Ok(())
    } else {
        Err(ParseError(format!("`{name}` takes no arguments")))
    }
}

fn one_file(name: &str, args: &[&str], default: &str) -> Result<String, ParseError> {
    match args {
        [] => Ok(default.to_owned()),
        [file] => Ok((*file).to_owned()),
        _ => Err(ParseError(format!("`{name}` takes at most one file name"))),
    }
}

/// Fails with `usage` when there are more than `most` arguments.
fn at_most(args: &[&str], most: usize, usage: &str) -> Result<(), ParseError> {
    if args.len() > most {
        Err(ParseError(usage.into()))
    } else {
        Ok(())
    }
}

/// Parses one command line. `Ok(None)` means the first word names no scenario.
fn parse_command(line: &str) -> Result<Option<Scenario>, ParseError> {
    let mut words = line.split_whitespace();
    let Some(name) = words.next() else {
        return Ok(None);
    };
    let args: Vec<&str> = words.collect();
    let name = name.to_ascii_lowercase();
    if let Some(scenario) = without_args(&name) {
        no_args(&name, &args)?;
        return Ok(Some(scenario));
    }
    if let Some(scenario) = with_numbers(&name, &args)? {
        return Ok(Some(scenario));
    }
    let scenario = match name.as_str() {
        "echo" => {
            let rest = line.trim_start();
            Scenario::Echo(rest.get(4..).unwrap_or("").trim().to_owned())
        }
        "code" | "coding" => Scenario::Code {
            file: one_file(&name, &args, "README.md")?,
        },
        "permission" | "perm" => Scenario::Permission {
            file: one_file(&name, &args, "permitted.txt")?,
        },
        "error" | "fail" => {
            let message = if args.is_empty() {
                "scripted failure".to_owned()
            } else {
                args.join(" ")
            };
            Scenario::Error { message }
        }
        "stop" => match args.as_slice() {
            [reason] if STOP_REASONS.contains(reason) => Scenario::Stop {
                reason: (*reason).to_owned(),
            },
            _ => {
                return Err(ParseError(format!(
                    "`stop` takes one of {}",
                    STOP_REASONS.join(", ")
                )));
            }
        },
        "help" => Scenario::Help,
        _ => return Ok(None),
    };
    Ok(Some(scenario))
}

/// The scenario named `name` that takes no arguments, if it is one.
fn without_args(name: &str) -> Option<Scenario> {
    Some(match name {
        "wait-cancel" | "wait_cancel" | "wait_for_cancel" | "wait" => Scenario::WaitCancel,
        "garbage" => Scenario::Garbage,
        "all-updates" | "all_updates" => Scenario::AllUpdates,
        "hang" => Scenario::Hang,
        "session-info" | "session_info" => Scenario::SessionInfo,
        _ => return None,
    })
}

/// The scenario named `name` whose arguments are numbers, if it is one.
fn with_numbers(name: &str, args: &[&str]) -> Result<Option<Scenario>, ParseError> {
    Ok(Some(match name {
        "flood" => {
            at_most(args, 3, "`flood` takes N, SIZE and RATE")?;
            Scenario::Flood {
                count: arg(args, 0, 1000, "flood N")?,
                size: arg(args, 1, 256, "flood SIZE")?,
                rate: arg(args, 2, 0, "flood RATE")?,
            }
        }
        "slow" => {
            at_most(args, 2, "`slow` takes N and MS")?;
            Scenario::Slow {
                count: arg(args, 0, 10, "slow N")?,
                delay_ms: arg(args, 1, 100, "slow MS")?,
            }
        }
        "crash" => {
            at_most(args, 1, "`crash` takes one exit code")?;
            Scenario::Crash {
                code: arg(args, 0, 1, "crash CODE")?,
            }
        }
        "oversized" => {
            at_most(args, 1, "`oversized` takes one size")?;
            Scenario::Oversized {
                bytes: arg(args, 0, 9_000_000, "oversized BYTES")?,
            }
        }
        "stderr" => {
            at_most(args, 1, "`stderr` takes one count")?;
            Scenario::Stderr {
                lines: arg(args, 0, 3, "stderr N")?,
            }
        }
        _ => return Ok(None),
    }))
}

/// Chooses the scenario for a prompt. Errors only for explicit `scenario:`
/// lines (and a broken default); a first word that merely looks like a
/// scenario but does not parse falls back to the default.
pub(crate) fn parse(text: &str, default: &str) -> Result<Scenario, ParseError> {
    let explicit = text.lines().map(str::trim).find_map(|line| {
        let head = line.get(..9)?;
        head.eq_ignore_ascii_case("scenario:")
            .then(|| line[9..].trim())
    });
    if let Some(command) = explicit {
        return parse_command(command)?
            .ok_or_else(|| ParseError(format!("unknown scenario `{command}`; try `help`")));
    }
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    if let Ok(Some(scenario)) = parse_command(first) {
        return Ok(scenario);
    }
    match parse_command(default)? {
        Some(Scenario::Echo(t)) if t.is_empty() => Ok(Scenario::Echo(String::new())),
        Some(scenario) => Ok(scenario),
        None => Err(ParseError(format!("unknown default scenario `{default}`"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_word_selects_the_scenario() {
        assert_eq!(
            parse("echo hello world", "echo"),
            Ok(Scenario::Echo("hello world".into()))
        );
        assert_eq!(
            parse("flood 5 10", "echo"),
            Ok(Scenario::Flood {
                count: 5,
                size: 10,
                rate: 0
            })
        );
        assert_eq!(
            parse("flood 5 10 1000", "echo"),
            Ok(Scenario::Flood {
                count: 5,
                size: 10,
                rate: 1000
            })
        );
        assert_eq!(
            parse("flood", "echo"),
            Ok(Scenario::Flood {
                count: 1000,
                size: 256,
                rate: 0
            })
        );
        assert_eq!(
            parse("  Slow 3 7\nmore", "echo"),
            Ok(Scenario::Slow {
                count: 3,
                delay_ms: 7
            })
        );
        assert_eq!(
            parse("code src/lib.rs", "echo"),
            Ok(Scenario::Code {
                file: "src/lib.rs".into()
            })
        );
        assert_eq!(
            parse("permission", "echo"),
            Ok(Scenario::Permission {
                file: "permitted.txt".into()
            })
        );
        assert_eq!(parse("wait-cancel", "echo"), Ok(Scenario::WaitCancel));
        assert_eq!(parse("crash 3", "echo"), Ok(Scenario::Crash { code: 3 }));
        assert_eq!(
            parse("oversized 10", "echo"),
            Ok(Scenario::Oversized { bytes: 10 })
        );
        assert_eq!(
            parse("stop refusal", "echo"),
            Ok(Scenario::Stop {
                reason: "refusal".into()
            })
        );
    }

    #[test]
    fn scenario_prefix_wins_anywhere() {
        let text = "Fix the login page\n\nscenario: flood 2 3\n";
        assert_eq!(
            parse(text, "echo"),
            Ok(Scenario::Flood {
                count: 2,
                size: 3,
                rate: 0
            })
        );
        assert_eq!(parse("SCENARIO: garbage", "echo"), Ok(Scenario::Garbage));
    }

    #[test]
    fn explicit_errors_are_reported() {
        assert!(parse("scenario: flood many", "echo").is_err());
        assert!(parse("scenario: teleport", "echo").is_err());
        assert!(parse("scenario: stop sideways", "echo").is_err());
    }

    #[test]
    fn other_text_runs_the_default() {
        assert_eq!(
            parse("Fix the bug", "echo"),
            Ok(Scenario::Echo(String::new()))
        );
        assert_eq!(
            parse("Code the login page", "echo"),
            Ok(Scenario::Echo(String::new()))
        );
        assert_eq!(
            parse("Fix the bug", "code"),
            Ok(Scenario::Code {
                file: "README.md".into()
            })
        );
        assert_eq!(parse("", "echo"), Ok(Scenario::Echo(String::new())));
        assert!(parse("anything", "nonsense").is_err());
    }
}
