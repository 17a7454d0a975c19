// The words the feed uses for what the agent reports (docs/ui.md lists
// them): how a turn ended, how the agent's program went away, a tool
// call's status.

/** What the feed says for each way a turn ends (docs/ui.md lists them). */
export const STOP_WORDS = Object.freeze({
  end_turn: 'Finished',
  cancelled: 'Cancelled by you',
  max_tokens: 'Stopped: the reply was too long',
  max_turn_requests: 'Stopped: too many steps in one turn',
  refusal: 'The agent refused',
});
export function stopWords(reason) { return STOP_WORDS[reason] || 'Ended'; }

// What the feed says when the agent's program goes away, by the reason the
// connection gives; the reason itself is the tooltip.
const EXIT_WORDS = [
  [/^agent closed its output/, 'The agent stopped running.'],
  [/^client shut down/, 'The agent was shut down.'],
  [/^reading from the agent failed/, 'Lost the connection to the agent.'],
];
export function exitWords(detail) {
  const hit = EXIT_WORDS.find(([re]) => re.test(String(detail || '')));
  return hit ? hit[1] : 'The agent stopped running.';
}

/** A tool call's status, in words. */
export const TOOL_WORDS = Object.freeze({ pending: 'Waiting', in_progress: 'Working', completed: 'Done', failed: 'Failed' });
