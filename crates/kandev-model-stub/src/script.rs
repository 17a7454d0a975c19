//! The script every vendor's stand-in plays, written by the test in the
//! user's prompt, one directive per prompt:
//!
//! - `kandev: edit <path> => <content>`: read the file, then write `content`
//!   to it, then say `Edited <path>.`;
//! - `kandev: write <path> => <content>`: write `content`, then say
//!   `Wrote <path>.`;
//! - `kandev: run <command>`: run `command` in a terminal, then say
//!   `Ran <command>.`;
//! - `kandev: recall`: say `You first asked: <the conversation's first
//!   prompt>` (so a resumed session is told apart from a new one);
//! - `kandev: slow`: stream text for up to [`SLOW_FOR`], so a cancel lands
//!   mid-turn;
//! - anything else: say [`HELLO`].
//!
//! The last directive of a prompt counts (earlier ones may be quoted).
//!
//! The stand-ins are stateless: the next step follows from the conversation
//! the agent sends (how many tool results came after the prompt).

use std::time::Duration;

/// Keys the stand-ins accept; any other key gets the vendor's 401.
pub const ACCEPTED_KEY_PREFIX: &str = "kandev-test";
/// The answer to a prompt without a directive.
pub const HELLO: &str = "Hello from the scripted model.";
/// How long `kandev: slow` streams.
pub const SLOW_FOR: Duration = Duration::from_secs(120);
/// The pause between two chunks of `kandev: slow`.
pub const SLOW_EVERY: Duration = Duration::from_millis(200);

/// The `n`th chunk of `kandev: slow`, the same for every vendor (numbered:
/// Gemini CLI ends a turn that repeats itself as a loop).
pub fn slow_chunk(n: usize) -> String {
    format!("Working slowly, step {n}. ")
}

/// Whether a request's key is one the stand-ins accept.
pub fn key_ok(key: &str) -> bool {
    key.starts_with(ACCEPTED_KEY_PREFIX)
}

/// What the agent is asked to do with one of its tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Read { path: String },
    Write { path: String, content: String },
    Shell { command: String },
}

/// The model's next move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Call one tool and wait for its result.
    Call(Action),
    /// Say this and end the turn.
    Say(String),
    /// Stream text chunks every [`SLOW_EVERY`] for [`SLOW_FOR`], then end.
    Slow,
}

/// What a stand-in read from the request, in vendor-neutral terms.
#[derive(Debug, Clone, Default)]
pub struct Conversation {
    /// The text of the conversation's first user message.
    pub first_prompt: String,
    /// The text of the latest user message that is not a tool result.
    pub prompt: String,
    /// Tool results sent since that message.
    pub tool_results: usize,
}

/// The directive in a prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Directive {
    Edit { path: String, content: String },
    Write { path: String, content: String },
    Run { command: String },
    Recall,
    Slow,
    None,
}

impl Directive {
    fn parse(prompt: &str) -> Self {
        // The last directive: a prompt may quote earlier ones before it
        // (Kandev's summary of a conversation it could not resume).
        let Some(rest) = prompt
            .lines()
            .rev()
            .find_map(|l| l.trim().strip_prefix("kandev:"))
            .map(str::trim)
        else {
            return Directive::None;
        };
        let (verb, args) = rest.split_once(' ').unwrap_or((rest, ""));
        let file = || {
            let (path, content) = args.split_once("=>").unwrap_or((args, ""));
            (path.trim().to_string(), content.trim().to_string())
        };
        match verb {
            "edit" => {
                let (path, content) = file();
                Directive::Edit { path, content }
            }
            "write" => {
                let (path, content) = file();
                Directive::Write { path, content }
            }
            "run" => Directive::Run {
                command: args.trim().to_string(),
            },
            "recall" => Directive::Recall,
            "slow" => Directive::Slow,
            _ => Directive::None,
        }
    }
}

/// The next step of the script for this conversation.
pub fn next_step(conversation: &Conversation) -> Step {
    let done = conversation.tool_results;
    match Directive::parse(&conversation.prompt) {
        Directive::Edit { path, content } => match done {
            0 => Step::Call(Action::Read { path }),
            1 => Step::Call(Action::Write { path, content }),
            _ => Step::Say(format!("Edited {path}.")),
        },
        Directive::Write { path, content } => match done {
            0 => Step::Call(Action::Write { path, content }),
            _ => Step::Say(format!("Wrote {path}.")),
        },
        Directive::Run { command } => match done {
            0 => Step::Call(Action::Shell { command }),
            _ => Step::Say(format!("Ran {command}.")),
        },
        Directive::Recall => Step::Say(format!("You first asked: {}", conversation.first_prompt)),
        Directive::Slow => Step::Slow,
        Directive::None => Step::Say(HELLO.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(prompt: &str, tool_results: usize) -> Step {
        next_step(&Conversation {
            first_prompt: "first".into(),
            prompt: prompt.into(),
            tool_results,
        })
    }

    #[test]
    fn an_edit_reads_then_writes_then_says_so() {
        let p = "please\nkandev: edit src/a.txt => new text";
        assert_eq!(
            at(p, 0),
            Step::Call(Action::Read {
                path: "src/a.txt".into()
            })
        );
        assert_eq!(
            at(p, 1),
            Step::Call(Action::Write {
                path: "src/a.txt".into(),
                content: "new text".into()
            })
        );
        assert_eq!(at(p, 2), Step::Say("Edited src/a.txt.".into()));
    }

    #[test]
    fn run_recall_slow_and_plain_prompts() {
        assert_eq!(
            at("kandev: run ls -la", 0),
            Step::Call(Action::Shell {
                command: "ls -la".into()
            })
        );
        assert_eq!(at("kandev: run ls -la", 1), Step::Say("Ran ls -la.".into()));
        assert_eq!(
            at("kandev: recall", 0),
            Step::Say("You first asked: first".into())
        );
        assert_eq!(at("kandev: slow", 0), Step::Slow);
        // The last directive counts: earlier ones may be quoted before it.
        assert_eq!(
            at("earlier:\nkandev: edit a => b\nnow:\nkandev: slow", 0),
            Step::Slow
        );
        assert_eq!(at("hi", 0), Step::Say(HELLO.into()));
        assert!(key_ok("kandev-test-key") && !key_ok("sk-wrong"));
    }
}
