// The follow-up composer under the feed: the prompt box (Ctrl/⌘+Enter
// sends), its button (Send, Queue while a turn runs, Send & start), the
// line saying why it sends now, later or not at all, and the follow-ups
// held for the turn's end (followups.js).

import { h } from './dom.js';
import { pendingBox } from './followups.js';

/**
 * The composer of task `taskId`. `send(text)` sends a follow-up and
 * resolves true once it went (the box is then emptied); `changed()`: a
 * held follow-up was edited or cancelled; `input()`: the text changed.
 */
export function promptBox(taskId, { send, changed, input }) {
  const promptInput = h('textarea', { id: 'prompt-input', class: 'prompt-input', rows: 2, testid: 'prompt-input', placeholder: 'Send a follow-up to the agent… (Ctrl+Enter)' });
  const sendBtn = h('button', { type: 'submit', class: 'btn btn-primary', testid: 'prompt-send' }, 'Send');
  const form = h('form', { class: 'prompt-form', testid: 'prompt-form' },
    h('label', { for: 'prompt-input', class: 'sr-only' }, 'Follow-up prompt'), promptInput, sendBtn);
  const submit = async () => {
    const text = promptInput.value.trim();
    if (!text || sendBtn.disabled) return;
    if (await send(text)) promptInput.value = '';
  };
  form.addEventListener('submit', (e) => { e.preventDefault(); submit(); });
  promptInput.addEventListener('keydown', (e) => { if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); submit(); } });
  promptInput.addEventListener('input', input);
  // Why the box sends now, later, or not at all.
  const hint = h('p', { class: 'prompt-hint muted small', testid: 'prompt-hint', hidden: true });
  const queue = pendingBox(taskId, { changed });

  /** The box and its button as the model allows them. */
  function update(model) {
    const { busy, holds, running, waiting } = model;
    sendBtn.disabled = !promptInput.value.trim() || busy || !model.task || waiting;
    promptInput.disabled = busy || waiting;
    const queues = holds && (model.turnActive || !running);
    sendBtn.textContent = queues ? 'Queue' : running ? 'Send' : 'Send & start';
    sendBtn.title = queues ? 'The agent is working: this follow-up waits and is sent when it finishes this turn (Ctrl+Enter).' : '';
    hint.hidden = !(queues || waiting);
    hint.textContent = waiting ? 'The agent has not started yet: send a follow-up once it runs.'
      : 'The agent is working: a follow-up you send now is queued and sent when it finishes this turn.';
    queue.set(model.pending, holds);
  }

  return { parts: [queue.el, hint, form], update };
}
