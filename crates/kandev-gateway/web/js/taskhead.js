// The task page's head: the title, the state and execution badges, the
// live connection's status, the action buttons (Mark done, Start, Cancel
// turn, Stop, Edit), and why a failed task failed.

import { h } from './dom.js';
import { STATE, STATE_LABELS, execBadge, plainError, failureText } from './common.js';

// The live connection's states: [what the header says, its tooltip].
const SOCKET_WORDS = {
  idle: ['Connecting…', 'Connecting to the live updates'],
  connecting: ['Connecting…', 'Connecting to the live updates'],
  open: ['Live', 'The agent’s activity shows here as it happens'],
  reconnecting: ['Reconnecting…', 'The connection dropped; catching up as soon as it is back'],
  closed: ['Offline', 'No live updates'],
};

/** A failed task's reason, in plain words first; the raw text behind Details. */
function failurePart() {
  const reason = h('p', { class: 'failure-reason', testid: 'failure-reason' });
  const raw = h('pre', { class: 'failure-raw', testid: 'failure-raw' });
  const el = h('div', { class: 'failure', testid: 'task-failure', role: 'alert', hidden: true },
    h('strong', { class: 'failure-head' }, 'Why it failed'), reason,
    h('details', { class: 'failure-details', testid: 'failure-details' }, h('summary', null, 'Details'), raw));
  // A failed task leads with why; a run waiting to retry says what went
  // wrong so far.
  function render(model) {
    const failed = model.state === STATE.FAILED;
    const retrying = model.retrying;
    const text = failed ? failureText(model.task, model.status) : retrying ? model.status.last_error : '';
    el.hidden = !(failed || retrying);
    if (el.hidden) return;
    const { short } = plainError(text || 'No reason was recorded.');
    el.classList.toggle('failure-retrying', retrying && !failed);
    el.firstChild.textContent = failed ? 'Why it failed' : 'The last attempt failed; retrying';
    reason.textContent = short;
    raw.textContent = text || '(none)';
    el.querySelector('details').hidden = !text || text === short;
  }
  return { el, render };
}

/**
 * The head; `on` has the buttons' actions: start, cancel, stop, edit,
 * markDone. `el` is the head, `failure.el` goes under it.
 */
export function taskHead(on) {
  const button = (cls, testid, action, text, more = {}) => h('button', { type: 'button', class: `btn ${cls}`.trim(), testid, onclick: action, ...more }, text);
  const title = h('h1', { class: 'page-title', testid: 'task-title' }, 'Task');
  const stateBadge = h('span', { class: 'badge', testid: 'task-state' });
  const execEl = h('span', { class: 'badge', testid: 'exec-status', hidden: true });
  const sockEl = h('span', { class: 'sock', testid: 'socket-status', dataset: { status: 'idle' } });
  const buttons = {
    start: button('btn-primary', 'btn-start', () => on.start(), 'Start'),
    cancel: button('', 'btn-cancel', () => on.cancel(), 'Cancel turn', { title: 'Cancel the current turn' }),
    stop: button('btn-danger', 'btn-stop', () => on.stop(), 'Stop', { title: 'Stop the agent' }),
    edit: button('btn-ghost', 'btn-edit', () => on.edit(), 'Edit'),
    // A task in review with nothing to review (no repository, or no change
    // on its branch) is finished here instead of through the state menu.
    done: button('btn-primary', 'btn-mark-done', () => on.markDone(), 'Mark done', { hidden: true }),
  };
  const failure = failurePart();
  const el = h('div', { class: 'page-head task-head' },
    h('div', { class: 'title-wrap' }, title, h('div', { class: 'badges' }, stateBadge, execEl)),
    h('div', { class: 'page-actions' },
      sockEl,
      buttons.done, buttons.start, buttons.cancel, buttons.stop, buttons.edit));

  function render(model) {
    const st = model.state;
    title.textContent = model.task.title;
    stateBadge.textContent = STATE_LABELS[st] || st;
    stateBadge.title = STATE_LABELS[st] || st;
    stateBadge.className = `badge state-${st}`;
    stateBadge.dataset.state = st;
    // One badge per fact: the execution's only when it says something the
    // state does not (queued, running, retrying, an idle live task).
    const b = execBadge(model.status, st, 'page');
    execEl.hidden = !b;
    execEl.dataset.exec = model.exec;
    if (b) { execEl.textContent = b.text; execEl.title = b.title || b.text; execEl.className = `badge exec-${b.cls}`; }
    failure.render(model);
  }

  function socketStatus(s) {
    const [text, tip] = SOCKET_WORDS[s] || SOCKET_WORDS.connecting;
    sockEl.textContent = text;
    sockEl.title = tip;
    sockEl.dataset.status = s;
  }

  /** The buttons as the model allows them; `open`: the live connection is. */
  function update(model, open) {
    const { active, busy } = model;
    buttons.start.disabled = busy || !model.task || active;
    buttons.start.textContent = !active && (model.terminal || (model.status && model.status.attempts > 0)) ? 'Restart' : 'Start';
    buttons.stop.disabled = busy || !active;
    buttons.cancel.disabled = !(open && model.running && model.turnActive);
  }

  return { el, failure, buttons, render, socketStatus, update };
}
