// CI checks of a task's pushed work. After an approval pushes the task's
// branch to a forge, the orchestrator polls the commit's checks and keeps
// their overall state in the task's metadata (`checks: {state, sha}`), so
// a card shows a badge without another request. The task view lists each
// check (GET /orchestrator/tasks/{id}/checks) with a "Fix CI" button
// (POST .../fix-ci) that sends the failing checks' names and the end of
// their logs to the agent as a follow-up in the same session. Everything
// the forge wrote is shown as text, never as markup.

import { h, clear, toast } from './dom.js';
import { get, post, enc } from './api.js';

const WORDS = {
  pending: ['CI running', 'The pushed commit\'s checks are running'],
  success: ['CI passed', 'Every check of the pushed commit passed'],
  failure: ['CI failed', 'A check of the pushed commit failed'],
  none: ['No CI', 'No check reported for the pushed commit'],
};

// The task's checks as its metadata says (null: nothing pushed).
function said(t) {
  const c = t && t.metadata && typeof t.metadata.checks === 'object' ? t.metadata.checks : null;
  return c && WORDS[c.state] ? c : null;
}

/** A small badge of the pushed commit's checks for a card, or null. */
export function checksBadge(t) {
  const c = said(t);
  if (!c) return null;
  const [text, title] = WORDS[c.state];
  return h('span', { class: `badge ci-${c.state}`, testid: 'card-checks', dataset: { checks: c.state }, title }, text);
}

/** What a card's look depends on. */
export function checksKey(t) {
  const c = said(t);
  return c ? [c.state, c.sha] : null;
}

function row(c) {
  const name = /^https?:\/\//.test(c.url || '')
    ? h('a', { href: c.url, target: '_blank', rel: 'noopener noreferrer' }, c.name)
    : h('span', null, c.name);
  const state = c.failed ? 'failure' : c.status === 'completed' ? 'success' : 'pending';
  return h('li', { class: `check check-${state}`, testid: 'check', dataset: { state } },
    h('span', { class: `badge ci-${state}` }, c.failed ? (c.conclusion || 'failed') : c.status === 'completed' ? (c.conclusion || 'passed') : c.status.replace('_', ' ')),
    ' ', name,
    c.failed && c.log_tail ? h('details', null, h('summary', null, 'End of its output'),
      h('pre', { class: 'check-log', testid: 'check-log' }, c.log_tail)) : null);
}

/**
 * The checks panel of a task: `update(task)` reloads it when the task's
 * checks changed; `onFixed` is called after "Fix CI" sent the failure.
 */
export function checksPanel(taskId, { onFixed }) {
  const list = h('ul', { class: 'checks', testid: 'checks' });
  const info = h('p', { class: 'muted small', testid: 'checks-info' });
  const fixBtn = h('button', { type: 'button', class: 'btn btn-small', testid: 'fix-ci', hidden: true, onclick: fix,
    title: 'Send the failing checks\' names and the end of their logs to the agent' }, 'Fix CI');
  const el = h('section', { testid: 'checks-panel', hidden: true }, h('h2', null, 'CI checks'), info, list, fixBtn);
  let shownKey = null;

  async function load() {
    try {
      const c = await get(`/orchestrator/tasks/${enc(taskId)}/checks`);
      const [text] = WORDS[c.state] || [c.state];
      el.hidden = !c.sha;
      el.dataset.state = c.state;
      info.textContent = c.sha ? `${text} on ${c.sha.slice(0, 12)}${c.polling ? ' (watching)' : ''}${c.error ? ` — ${c.error}` : ''}` : '';
      clear(list).append(...(c.checks || []).map(row));
      fixBtn.hidden = c.state !== 'failure';
      fixBtn.textContent = c.fix_sent_at ? 'Fix CI again' : 'Fix CI';
    } catch (e) {
      info.textContent = `The checks cannot be read: ${e.message}`;
    }
  }

  async function fix() {
    fixBtn.disabled = true;
    try {
      const sent = await post(`/orchestrator/tasks/${enc(taskId)}/fix-ci`);
      toast(`Sent to the agent: ${(sent.checks || []).join(', ')}`, 'info');
      onFixed && onFixed();
      await load();
    } catch (e) {
      toast(`Fix CI: ${e.message}`, 'error');
    } finally {
      fixBtn.disabled = false;
    }
  }

  function update(task) {
    const key = JSON.stringify(checksKey(task));
    if (key === shownKey) return;
    shownKey = key;
    if (checksKey(task)) load(); else el.hidden = true;
  }

  return { el, update, load };
}
