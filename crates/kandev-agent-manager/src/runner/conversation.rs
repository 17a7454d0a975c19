//! A task's conversation as the agent manager sent and saw it (each
//! prompt, and the agent's last message after it), kept bounded per task,
//! and the summary of it that starts a new session when the agent can no
//! longer load its old one (its session store went with its container).

use uuid::Uuid;

use super::{Shared, bounded_text};
use crate::store::Exchange;

/// The most exchanges kept per task.
const KEEP_EXCHANGES: i64 = 32;
/// The longest prompt and reply kept per exchange.
const MAX_STORED_TEXT: usize = 2 * 1024;
/// The longest summary put before a prompt.
pub(super) const MAX_SUMMARY_BYTES: usize = 8 * 1024;
/// The longest prompt or reply quoted in a summary.
const MAX_QUOTED_TEXT: usize = 1536;

/// Records the prompts a run sent, in order; the agent's last message
/// (`reply`) goes with the last of them.
pub(super) async fn record(
    shared: &Shared,
    task_id: Uuid,
    instance_id: Uuid,
    prompts: Vec<String>,
    reply: &str,
) {
    let count = prompts.len();
    for (n, prompt) in prompts.into_iter().enumerate() {
        let exchange = Exchange {
            prompt: cut(&prompt, MAX_STORED_TEXT),
            reply: if n + 1 == count {
                cut(reply, MAX_STORED_TEXT)
            } else {
                String::new()
            },
        };
        if let Err(e) = shared
            .store
            .record_exchange(task_id, instance_id, &exchange, KEEP_EXCHANGES)
            .await
        {
            tracing::warn!(%task_id, error = %e, "cannot record the conversation");
            return;
        }
    }
}

/// The task's conversation so far, oldest first (empty when unknown).
pub(super) async fn of_task(shared: &Shared, task_id: Uuid) -> Vec<Exchange> {
    match shared.store.exchanges(task_id, KEEP_EXCHANGES).await {
        Ok(exchanges) => exchanges,
        Err(e) => {
            tracing::warn!(%task_id, error = %e, "cannot read the conversation");
            Vec::new()
        }
    }
}

/// `text` trimmed and cut to at most `max` bytes at a character boundary.
fn cut(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} […]", &text[..end])
}

const FOOTER: &str = "[End of the summary. The new prompt follows.]\n\n";

/// What goes before a prompt that starts a new session in place of one
/// that could not be loaded (`why`): the conversation so far (the newest
/// exchanges that fit), plainly labelled, at most [`MAX_SUMMARY_BYTES`].
pub(super) fn summary(exchanges: &[Exchange], why: &str) -> String {
    let why = cut(why, 300);
    let mut header = format!(
        "[Kandev: the agent's earlier session for this task could not be resumed ({why}), \
         so this prompt starts a new session.]\n"
    );
    if exchanges.is_empty() {
        header.push_str("[No record of the conversation so far is available.]\n\n");
        return header;
    }
    header.push_str(
        "[The conversation so far, summarised: each earlier prompt and the agent's \
         last message after it, oldest first.]\n\n",
    );
    let entry = |n: usize, e: &Exchange| {
        let mut text = format!(
            "--- Earlier prompt {n} ---\n{}\n",
            cut(&e.prompt, MAX_QUOTED_TEXT)
        );
        if !e.reply.trim().is_empty() {
            text.push_str(&format!(
                "--- The agent's last message after it ---\n{}\n",
                cut(&e.reply, MAX_QUOTED_TEXT)
            ));
        }
        text.push('\n');
        text
    };
    // Room for the "left out" note too.
    let budget = MAX_SUMMARY_BYTES - header.len() - FOOTER.len() - 64;
    let mut kept: Vec<String> = Vec::new();
    let mut used = 0;
    for (i, e) in exchanges.iter().enumerate().rev() {
        let text = entry(i + 1, e);
        if used + text.len() > budget {
            if kept.is_empty() {
                kept.push(bounded_text(&text, budget.saturating_sub(120)));
            }
            break;
        }
        used += text.len();
        kept.push(text);
    }
    let left_out = exchanges.len() - kept.len();
    let mut out = header;
    if left_out > 0 {
        out.push_str(&format!("[{left_out} older exchange(s) left out.]\n\n"));
    }
    for text in kept.iter().rev() {
        out.push_str(text);
    }
    out.push_str(FOOTER);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(prompt: &str, reply: &str) -> Exchange {
        Exchange {
            prompt: prompt.into(),
            reply: reply.into(),
        }
    }

    #[test]
    fn the_summary_quotes_the_conversation_in_order_and_is_labelled() {
        let text = summary(
            &[ex("fix the bug", "Fixed it."), ex("add a test", "")],
            "session/load failed: Session not found",
        );
        assert!(text.starts_with("[Kandev: the agent's earlier session"));
        assert!(text.contains("Session not found"));
        let first = text.find("fix the bug").unwrap();
        let reply = text.find("Fixed it.").unwrap();
        let second = text.find("add a test").unwrap();
        assert!(first < reply && reply < second, "{text}");
        assert!(text.ends_with(FOOTER));
        assert!(text.len() <= MAX_SUMMARY_BYTES);
    }

    #[test]
    fn the_summary_is_bounded_and_keeps_the_newest() {
        let big = "é".repeat(5000);
        let many: Vec<_> = (0..40)
            .map(|n| ex(&format!("prompt {n} {big}"), &big))
            .collect();
        let text = summary(&many, "gone");
        assert!(text.len() <= MAX_SUMMARY_BYTES, "{}", text.len());
        assert!(text.contains("prompt 39"));
        assert!(!text.contains("prompt 0 "));
        assert!(text.contains("older exchange(s) left out"));

        let huge = [ex(&"x".repeat(1 << 20), &"y".repeat(1 << 20))];
        let text = summary(&huge, &"w".repeat(10_000));
        assert!(text.len() <= MAX_SUMMARY_BYTES, "{}", text.len());

        let none = summary(&[], "gone");
        assert!(none.contains("No record"));
    }
}
