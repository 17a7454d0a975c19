// "Needs you": across every board the person can see, the tasks that wait
// for them: a permission or a question pending (Waiting for input), a
// review waiting (Review), a failure (Failed). Opening the view reads every
// board's cards once; after that it follows what the notifier sees (the
// open board's pushes, its slow poll of the other boards). The count is in
// the top bar's link and in the page's title.

import { h, clear, fmtTime } from './dom.js';
import { api, get, enc } from './api.js';
import { STATE, STATE_LABELS } from './common.js';
import { needsYou, onNeedsChange } from './notify.js';

const GROUPS = [
  { state: STATE.WAITING_FOR_INPUT, title: 'Waiting for your answer', hint: 'A permission or a question is pending.' },
  { state: STATE.REVIEW, title: 'Ready for review', hint: 'The agent finished; review its changes.' },
  { state: STATE.FAILED, title: 'Failed', hint: 'The run failed; look at why and retry or give up.' },
];

/** Keeps the top bar's link `link` counting what needs the person. */
export function needsLink(link) {
  const badge = h('span', { class: 'count', testid: 'needs-count' }, '');
  link.append(' ', badge);
  const render = () => {
    const n = needsYou().length;
    badge.textContent = n ? String(n) : '';
    badge.hidden = !n;
    link.setAttribute('aria-label', n ? `Needs you: ${n}` : 'Needs you: nothing');
  };
  onNeedsChange(render);
  render();
}

/** Reads every board's cards (the notifier sees them); boards that fail are skipped. */
async function readAll() {
  const boards = await api.boards();
  await Promise.all(boards.map((b) => get(`/boards/${enc(b.id)}/cards`).catch(() => null)));
  return boards;
}

export function needsView(main, { setCrumbs }) {
  let alive = true;
  let boardNames = new Map();
  const status = h('p', { class: 'muted small', testid: 'needs-status', 'aria-live': 'polite' }, 'Loading…');
  const body = h('div', { class: 'needs', testid: 'needs' });
  setCrumbs([{ href: '#/boards', text: 'Boards' }, { text: 'Needs you' }]);
  clear(main).append(h('div', { class: 'page-head' }, h('h1', { class: 'page-title' }, 'Needs you')), status, body);

  function item({ task, execution }) {
    const board = boardNames.get(task.board_id);
    const err = execution && execution.last_error;
    return h('li', { class: 'needs-item', testid: 'needs-item', dataset: { taskId: task.id, state: task.state } },
      h('a', { href: `#/tasks/${encodeURIComponent(task.id)}`, class: 'needs-title', testid: 'needs-link' }, task.title || '(untitled)'),
      h('span', { class: 'muted small' }, board ? `on ${board}` : ''),
      h('span', { class: 'muted small' }, fmtTime(task.updated_at)),
      task.state === STATE.FAILED && err ? h('p', { class: 'needs-error small', testid: 'needs-error' }, String(err).slice(0, 300)) : null);
  }

  function render() {
    if (!alive) return;
    const all = needsYou();
    document.title = all.length ? `Needs you (${all.length}) · Kandev` : 'Needs you · Kandev';
    clear(body);
    if (!all.length) {
      body.append(h('p', { class: 'empty muted', testid: 'needs-empty' }, 'Nothing waits for you.'));
      return;
    }
    for (const g of GROUPS) {
      const list = all.filter((v) => v.task.state === g.state);
      if (!list.length) continue;
      body.append(h('section', { class: 'needs-group', testid: 'needs-group', dataset: { state: g.state }, 'aria-labelledby': `needs-${g.state}` },
        h('h2', { id: `needs-${g.state}`, class: 'needs-heading' }, `${g.title} `, h('span', { class: 'count' }, String(list.length))),
        h('p', { class: 'muted small' }, g.hint),
        h('ul', { class: 'needs-list', 'aria-label': STATE_LABELS[g.state] }, list.map(item))));
    }
  }

  const stop = onNeedsChange(render);
  render();
  readAll().then((boards) => {
    if (!alive) return;
    boardNames = new Map(boards.map((b) => [b.id, b.name]));
    status.textContent = `Across ${boards.length} board${boards.length === 1 ? '' : 's'}.`;
    render();
  }).catch((e) => { if (alive) status.textContent = `Could not read the boards: ${e.message}`; });
  return () => { alive = false; stop(); };
}
