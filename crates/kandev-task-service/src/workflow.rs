//! Workflows (issue 41): a board's own columns and what a card does in them,
//! as plain data and pure decisions; the store applies them in the change's
//! transaction.
//!
//! A column maps to one of the seed's task states, so a task's state stays
//! the contract every service reads. A column may have a WIP limit (cards
//! beyond it wait in the column's queue, `queued`, and enter in turn as
//! slots free) and automation: entering it starts a run of its agent type
//! with its prompt template (the task goes to TODO with that agent type and
//! `autostart`, which the orchestrator launches as it launches any task); a
//! run that finishes in it moves the card to `on_success`, one that fails to
//! `on_failure`. A card whose state changes otherwise follows its state: to
//! the first column mapping the new state (today's board, the default
//! workflow of every board).

use std::collections::HashSet;

use serde_json::Value;
use uuid::Uuid;

use crate::domain::{Result, Task, TaskError, TaskState, agent_type, bounded};

/// The most columns a board has.
pub const MAX_COLUMNS: usize = 32;
pub const MAX_COLUMN_NAME_CHARS: usize = 100;
pub const MAX_PROMPT_TEMPLATE_BYTES: usize = 16 * 1024;
/// The metadata key holding the prompt an automated column rendered (the
/// orchestrator launches with it; removed when the card leaves), and the
/// actor of the moves a workflow makes by itself.
pub use kandev_events::task::{
    WORKFLOW_ACTOR, WORKFLOW_NEW_SESSION, WORKFLOW_PROFILE, WORKFLOW_PROMPT,
};

/// One column of a board.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub id: Uuid,
    pub board_id: Uuid,
    pub name: String,
    /// Its place, from 0, left to right.
    pub position: i32,
    /// `#rrggbb`, or empty for the default.
    pub colour: String,
    /// The state a card moved here by a person takes.
    pub state: TaskState,
    /// At most this many cards are in the column (not queued); none: no limit.
    pub wip_limit: Option<i32>,
    /// Entering starts a run of this agent type.
    pub agent_type: Option<String>,
    pub prompt_template: String,
    /// Its run starts a new agent session instead of continuing the task's.
    pub new_session: bool,
    /// The agent profile its run uses (none: the task's own).
    pub profile_id: Option<Uuid>,
    /// Where a card goes when its run here finishes.
    pub on_success: Option<Uuid>,
    /// Where a card goes when its run here fails.
    pub on_failure: Option<Uuid>,
}

impl Column {
    pub fn is_automated(&self) -> bool {
        self.agent_type.is_some()
    }
}

/// A column as a request gives it, not yet checked.
#[derive(Debug, Clone, Default)]
pub struct ColumnInput {
    /// Kept for a column that exists; a new one may choose its id (so
    /// another column can name it as its next step) or get one.
    pub id: Option<String>,
    pub name: String,
    pub colour: String,
    pub state: String,
    pub wip_limit: Option<i32>,
    pub agent_type: Option<String>,
    pub prompt_template: String,
    pub new_session: bool,
    pub profile_id: Option<String>,
    pub on_success: Option<String>,
    pub on_failure: Option<String>,
}

fn invalid(msg: impl Into<String>) -> TaskError {
    TaskError::InvalidArgument(msg.into())
}

fn column_id(field: &str, s: &str) -> Result<Uuid> {
    Uuid::parse_str(s).map_err(|_| invalid(format!("{field} {s:?} is not a valid column id")))
}

fn colour(s: &str) -> Result<String> {
    let ok = s.is_empty()
        || (s.len() == 7 && s.starts_with('#') && s[1..].chars().all(|c| c.is_ascii_hexdigit()));
    if !ok {
        return Err(invalid(format!("colour {s:?} must be #rrggbb or empty")));
    }
    Ok(s.to_ascii_lowercase())
}

fn name(s: &str) -> Result<String> {
    let s = s.trim();
    if s.is_empty() || s.chars().count() > MAX_COLUMN_NAME_CHARS {
        return Err(invalid(format!(
            "column name must be 1 to {MAX_COLUMN_NAME_CHARS} characters"
        )));
    }
    bounded("column name", s, MAX_COLUMN_NAME_CHARS * 4)
}

/// A column's profile: a UUID, and only on a column that starts runs.
fn profile(input: &ColumnInput) -> Result<Option<Uuid>> {
    let Some(id) = input.profile_id.as_deref().filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    if input.agent_type.as_deref().is_none_or(str::is_empty) {
        return Err(invalid(format!(
            "profile_id of column {:?}: only a column with an agent_type starts runs",
            input.name
        )));
    }
    Uuid::parse_str(id)
        .map(Some)
        .map_err(|_| invalid(format!("profile_id {id:?} is not a valid profile id")))
}

/// Checks a board's new set of columns, in order: names, colours, states,
/// WIP limits, agent types, and that every next step is one of them.
pub fn parse_columns(board_id: Uuid, inputs: Vec<ColumnInput>) -> Result<Vec<Column>> {
    if inputs.is_empty() || inputs.len() > MAX_COLUMNS {
        return Err(invalid(format!(
            "a board has 1 to {MAX_COLUMNS} columns, not {}",
            inputs.len()
        )));
    }
    let mut columns = Vec::with_capacity(inputs.len());
    for (i, input) in inputs.iter().enumerate() {
        let id = match input.id.as_deref().filter(|s| !s.is_empty()) {
            Some(s) => column_id("id", s)?,
            None => Uuid::now_v7(),
        };
        if let Some(limit) = input.wip_limit.filter(|l| *l < 1) {
            return Err(invalid(format!(
                "wip_limit of column {:?} is {limit}: it must be 1 or more (absent: no limit)",
                input.name
            )));
        }
        let state = input
            .state
            .parse::<TaskState>()
            .map_err(|e| invalid(format!("column {:?}: {e}", input.name)))?;
        let agent = match input.agent_type.as_deref().filter(|s| !s.is_empty()) {
            Some(a) => Some(agent_type(a)?),
            None => None,
        };
        let next = |v: &Option<String>, field: &str| -> Result<Option<Uuid>> {
            v.as_deref()
                .filter(|s| !s.is_empty())
                .map(|s| column_id(field, s))
                .transpose()
        };
        columns.push(Column {
            id,
            board_id,
            name: name(&input.name)?,
            position: i as i32,
            colour: colour(&input.colour)?,
            state,
            wip_limit: input.wip_limit,
            agent_type: agent,
            prompt_template: bounded(
                "prompt_template",
                &input.prompt_template,
                MAX_PROMPT_TEMPLATE_BYTES,
            )?,
            new_session: input.new_session,
            profile_id: profile(input)?,
            on_success: next(&input.on_success, "on_success")?,
            on_failure: next(&input.on_failure, "on_failure")?,
        });
    }
    let ids: HashSet<Uuid> = columns.iter().map(|c| c.id).collect();
    if ids.len() != columns.len() {
        return Err(invalid("two columns have the same id"));
    }
    for c in &columns {
        for (field, next) in [("on_success", c.on_success), ("on_failure", c.on_failure)] {
            if let Some(next) = next.filter(|n| !ids.contains(n)) {
                return Err(invalid(format!(
                    "{field} of column {:?} names unknown column {next}",
                    c.name
                )));
            }
        }
    }
    Ok(columns)
}

/// The default workflow: one column per state, in the seed's order, no
/// limits, no automation (the board as it always was).
pub fn default_columns(board_id: Uuid) -> Vec<Column> {
    TaskState::ALL
        .iter()
        .enumerate()
        .map(|(i, state)| Column {
            id: Uuid::now_v7(),
            board_id,
            name: state.label().to_string(),
            position: i as i32,
            colour: String::new(),
            state: *state,
            wip_limit: None,
            agent_type: None,
            prompt_template: String::new(),
            new_session: false,
            profile_id: None,
            on_success: None,
            on_failure: None,
        })
        .collect()
}

/// The first column (leftmost) mapping `state`.
pub fn column_of_state(columns: &[Column], state: TaskState) -> Option<&Column> {
    columns.iter().find(|c| c.state == state)
}

/// Where a card goes after its state changed from `from` to `to` while in
/// `current`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// It stays in its column (or in none).
    Stay,
    /// It is shown in another column; nothing starts.
    Place(Uuid),
    /// It enters a column: its automation and limit apply.
    Enter(Uuid),
}

/// The workflow's answer to a state change.
pub fn follow(columns: &[Column], current: Option<Uuid>, from: TaskState, to: TaskState) -> Next {
    use TaskState::*;
    let cur = current.and_then(|id| columns.iter().find(|c| c.id == id));
    if let Some(cur) = cur {
        let ran = matches!(from, InProgress | WaitingForInput);
        if let Some(next) = cur
            .on_success
            .filter(|_| ran && matches!(to, Review | Completed))
        {
            return Next::Enter(next);
        }
        if let Some(next) = cur.on_failure.filter(|_| to == Failed) {
            return Next::Enter(next);
        }
        if cur.is_automated() && matches!(to, Todo | InProgress | WaitingForInput) {
            return Next::Stay;
        }
        if cur.state == to {
            return Next::Stay;
        }
    }
    match column_of_state(columns, to) {
        Some(c) if Some(c.id) != current => Next::Place(c.id),
        _ => Next::Stay,
    }
}

/// What a column's prompt template is filled with.
#[derive(Debug, Clone, Copy)]
pub struct PromptFields<'a> {
    pub title: &'a str,
    pub description: &'a str,
    /// What the previous step's run said it did (the task's `summary`).
    pub summary: &'a str,
}

impl<'a> From<&'a Task> for PromptFields<'a> {
    fn from(task: &'a Task) -> Self {
        PromptFields {
            title: &task.title,
            description: &task.description,
            summary: task
                .metadata
                .get("summary")
                .and_then(Value::as_str)
                .unwrap_or(""),
        }
    }
}

/// The prompt of an automated column for a task: its template with
/// `{title}`, `{description}` and `{summary}` filled in (`{diff}` stays:
/// the agent manager, which holds the task's clone, fills it in at
/// launch); an empty template is the title and description, then the
/// previous summary when there is one.
pub fn render_prompt(template: &str, task: PromptFields<'_>) -> String {
    let PromptFields {
        title,
        description,
        summary,
    } = task;
    if template.trim().is_empty() {
        let mut prompt = title.to_string();
        for part in [description, summary] {
            if !part.is_empty() {
                prompt.push_str("\n\n");
                prompt.push_str(part);
            }
        }
        return prompt;
    }
    // One pass, so a value holding a placeholder is not filled in again.
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let tail = &rest[start..];
        let value = [
            ("{title}", title),
            ("{description}", description),
            ("{summary}", summary),
        ]
        .into_iter()
        .find(|(key, _)| tail.starts_with(key));
        match value {
            Some((key, value)) => {
                out.push_str(value);
                rest = &tail[key.len()..];
            }
            None => {
                out.push('{');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(name: &str, state: &str) -> ColumnInput {
        ColumnInput {
            name: name.into(),
            state: state.into(),
            ..Default::default()
        }
    }

    #[test]
    fn bad_columns_are_refused_with_the_reason() {
        let board = Uuid::now_v7();
        assert!(parse_columns(board, vec![]).is_err());
        let mut wip = input("a", "TODO");
        wip.wip_limit = Some(-1);
        let err = parse_columns(board, vec![wip]).unwrap_err().to_string();
        assert!(err.contains("wip_limit"), "{err}");
        let err = parse_columns(board, vec![input("a", "DONE")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("DONE"), "{err}");
        let mut next = input("a", "TODO");
        next.on_success = Some(Uuid::now_v7().to_string());
        let err = parse_columns(board, vec![next]).unwrap_err().to_string();
        assert!(err.contains("unknown column"), "{err}");
        // A profile only on a column that starts runs, and a UUID.
        let mut profiled = input("a", "TODO");
        profiled.profile_id = Some(Uuid::now_v7().to_string());
        let err = parse_columns(board, vec![profiled.clone()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("profile_id") && err.contains("agent_type"),
            "{err}"
        );
        profiled.agent_type = Some("mock-agent".into());
        profiled.profile_id = Some("haiku".into());
        let err = parse_columns(board, vec![profiled])
            .unwrap_err()
            .to_string();
        assert!(err.contains("profile_id \"haiku\""), "{err}");
        let mut red = input("a", "TODO");
        red.colour = "red".into();
        assert!(parse_columns(board, vec![red]).is_err());
    }

    fn column(state: TaskState, agent: Option<&str>) -> Column {
        Column {
            agent_type: agent.map(str::to_string),
            ..default_columns(Uuid::nil())
                .into_iter()
                .find(|c| c.state == state)
                .unwrap()
        }
    }

    #[test]
    fn a_card_follows_its_state_unless_its_column_says_otherwise() {
        use TaskState::*;
        let mut plan = column(InProgress, Some("mock-agent"));
        let review = column(Review, None);
        plan.on_success = Some(review.id);
        let cols = vec![column(Todo, None), plan.clone(), review.clone()];
        assert_eq!(follow(&cols, Some(plan.id), Todo, InProgress), Next::Stay);
        assert_eq!(
            follow(&cols, Some(plan.id), InProgress, Completed),
            Next::Enter(review.id)
        );
        assert_eq!(
            follow(&cols, Some(cols[0].id), Todo, Review),
            Next::Place(review.id)
        );
        assert_eq!(follow(&cols, Some(review.id), Todo, Failed), Next::Stay);
    }

    #[test]
    fn a_template_is_filled_once() {
        let task = PromptFields {
            title: "T {summary}",
            description: "D",
            summary: "S",
        };
        assert_eq!(
            render_prompt("do {title}: {description} after {summary} {x}", task),
            "do T {summary}: D after S {x}"
        );
        assert_eq!(render_prompt("", task), "T {summary}\n\nD\n\nS");
    }
}
