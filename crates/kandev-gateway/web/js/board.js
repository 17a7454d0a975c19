// The board view: one column per state, cards pushed by the server over
// the board's live stream (boardsocket.js: a snapshot, then each change;
// no polling), drag and drop plus a keyboard-friendly state select, search
// and filters (boardfilter.js). Columns scroll on their own and are
// reachable from the keyboard.

import { h, clear, toast, confirmDialog } from './dom.js';
import { api, taskState } from './api.js';
import { STATE, STATES, STATE_LABELS, execBadge, execState, taskDialog } from './common.js';
import { BoardSocket } from './boardsocket.js';
import { boardFilter } from './boardfilter.js';
import { followBoard, seeCards } from './notify.js';
import { editWorkflow, loadColumns, moveToColumn } from './workflow.js';
import { BoardColumns } from './boardcolumns.js';
import { editBlockers } from './blockers.js';
import { enhanceColumns } from './columns.js';
import { checksBadge, checksKey } from './checks.js';
import { editTracker } from './tracker.js';

// A repository URL's short name: its last path segment without `.git`
// (https://github.com/acme/widgets.git → widgets).
export function repoName(url) {
  const path = String(url || '').replace(/[?#].*$/, '').replace(/\/+$/, '').replace(/\.git$/, '');
  return path.split(/[/:]/).pop() || '';
}

// An http(s) link, or null: nothing else becomes a link.
function webUrl(u) {
  try {
    const url = new URL(String(u));
    return url.protocol === 'http:' || url.protocol === 'https:' ? url.href : null;
  } catch { return null; }
}

// The card's repository, branch (the delivered one, else the base the
// task works from) and, once approval opened one, its pull request.
function repoLine(t) {
  const delivered = (t.metadata && typeof t.metadata.delivered === 'object' && t.metadata.delivered) || {};
  const repo = repoName(t.repository_url);
  const branch = typeof delivered.branch === 'string' && delivered.branch ? delivered.branch : t.branch;
  const pr = webUrl(delivered.pull_request);
  if (!repo && !branch && !pr) return null;
  const number = pr && /\/(?:pull|pulls|merge_requests)\/(\d+)/.exec(pr);
  return h('div', { class: 'card-repo', testid: 'card-repo' },
    repo ? h('span', { class: 'card-repo-name', testid: 'card-repo-name', title: t.repository_url }, repo) : null,
    branch ? h('code', { class: 'card-branch', testid: 'card-branch', title: `${delivered.branch ? 'Branch' : 'Base branch'} ${branch}` }, branch) : null,
    pr ? h('a', { class: 'card-pr', testid: 'card-pr', href: pr, target: '_blank', rel: 'noopener noreferrer', title: `Pull request ${pr}` },
      number ? `PR #${number[1]}` : 'Pull request') : null);
}

export function boardView(main, boardId, { setCrumbs, debug }) {
  let alive = true;
  let board = null;
  const cards = new Map();    // id -> {el, task, key}
  const statuses = new Map(); // id -> execution status
  const pending = new Set();  // ids with a state change in flight
  const filter = boardFilter(boardId, () => sortColumns());

  const title = h('h1', { class: 'page-title', testid: 'board-title' }, 'Board');
  const newBtn = h('button', { type: 'button', class: 'btn btn-primary', testid: 'new-task', onclick: createTask }, '+ New task');
  const flowBtn = h('button', { type: 'button', class: 'btn', testid: 'edit-workflow',
    onclick: async () => { if (await editWorkflow(boardId)) readColumns(); } }, 'Workflow');
  const trackerBtn = h('button', { type: 'button', class: 'btn', testid: 'edit-tracker',
    title: 'The GitHub repository whose issues become this board\'s tasks', onclick: () => editTracker(boardId) }, 'Tracker');
  const colWrap = h('div', { class: 'columns', testid: 'columns' });
  const columns = new BoardColumns(colWrap, dropTask);
  const updated = h('span', { class: 'muted small', testid: 'board-updated', 'aria-live': 'off' });
  clear(main).append(
    h('div', { class: 'page-head' }, title, h('div', { class: 'page-actions' }, updated, trackerBtn, flowBtn, newBtn)),
    filter.el,
    colWrap);

  function cardKey(t) {
    const s = statuses.get(t.id);
    return JSON.stringify([t.title, t.agent_type, t.priority, taskState(t), t.version, preparing(t), s && [execState(s), s.queue_position, s.last_error, s.attempts],
      t.repository_url, t.branch, t.metadata?.delivered, t.column_id, t.queued, t.blocked, t.blocked_reason,
      t.parent_id, (t.subtasks || []).length, checksKey(t)]);
  }

  // "preparing the agent image …" while its build runs (agent.preparing);
  // once built, the card no longer says it.
  function preparing(t) {
    const said = t.metadata?.agent_image;
    return typeof said === 'string' && said.startsWith('preparing') ? said : null;
  }

  function renderCard(t) {
    const st = taskState(t);
    const badge = execBadge(statuses.get(t.id), st);
    const exec = execState(statuses.get(t.id));
    const select = h('select', { class: 'state-select', testid: 'card-state-select', 'aria-label': `State of ${t.title}` },
      STATES.map((s) => h('option', { value: s }, STATE_LABELS[s])));
    select.value = st;
    select.addEventListener('change', () => moveTask(t.id, select.value));
    const el = h('li', { class: `card prio-${t.priority > 0 ? 'high' : 'normal'}`, testid: 'card', draggable: 'true',
      dataset: { taskId: t.id, state: st } },
      h('a', { class: 'card-title', href: `#/tasks/${encodeURIComponent(t.id)}`, testid: 'card-link' }, t.title || '(untitled)'),
      h('div', { class: 'card-meta' },
        t.agent_type ? h('span', { class: 'chip', testid: 'card-agent' }, t.agent_type) : h('span', { class: 'chip muted' }, 'no agent'),
        h('span', { class: 'chip', testid: 'card-priority', title: 'Priority' }, `P${t.priority ?? 0}`),
        t.queued ? h('span', { class: 'chip chip-queued', testid: 'card-queued', title: 'The column is full: this card waits its turn' }, 'Queued') : null,
        badge && badge.cls !== 'attention' ? h('span', { class: `badge exec-${badge.cls}`, testid: 'card-status', dataset: { exec }, title: badge.text }, badge.text) : null,
        checksBadge(t)),
      // What the task waits for, in full: a person has to act.
      badge && badge.cls === 'attention' ? h('p', { class: 'card-callout exec-attention', testid: 'card-status', dataset: { exec }, title: badge.title }, badge.text) : null,
      preparing(t) && taskState(t) === STATE.IN_PROGRESS ? h('p', { class: 'card-note', testid: 'card-preparing' }, preparing(t)) : null,
      // Held until its blockers complete: why, in the server's words.
      t.blocked ? h('p', { class: 'card-callout card-blocked', testid: 'card-blocked', title: t.blocked_reason }, `Blocked: ${t.blocked_reason || 'waiting for other tasks'}`) : null,
      t.parent_id || (t.subtasks || []).length ? h('p', { class: 'card-note', testid: 'card-family' },
        t.parent_id ? `Subtask of “${cards.get(t.parent_id)?.task.title || 'another task'}”` : `${t.subtasks.length} subtask${t.subtasks.length === 1 ? '' : 's'}`) : null,
      repoLine(t),
      h('div', { class: 'card-actions' },
        select,
        h('button', { type: 'button', class: 'btn btn-small', testid: 'card-move', 'aria-label': `Move ${t.title} to a column`, onclick: () => moveToColumn(boardId, t) }, 'Move'),
        h('button', { type: 'button', class: 'btn btn-small', testid: 'card-edit', 'aria-label': `Edit ${t.title}`, onclick: () => editTask(t.id) }, 'Edit'),
        h('button', { type: 'button', class: 'btn btn-small', testid: 'card-blockers', 'aria-label': `Tasks ${t.title} waits for`,
          onclick: () => editBlockers(t, [...cards.values()].map((c) => c.task)) }, 'Blocked by…'),
        h('button', { type: 'button', class: 'btn btn-small btn-danger-ghost', testid: 'card-delete', 'aria-label': `Delete ${t.title}`, onclick: () => deleteTask(t.id) }, 'Delete')));
    el.addEventListener('dragstart', (e) => {
      e.dataTransfer.setData('text/x-kandev-task', t.id);
      e.dataTransfer.effectAllowed = 'move';
      el.classList.add('dragging');
    });
    el.addEventListener('dragend', () => el.classList.remove('dragging'));
    return el;
  }

  // Into the task's column (a state change in flight: the first column of
  // the new state).
  function place(el, task, state) {
    const { list } = state ? columns.ofState(state) : columns.of(task, taskState(task));
    if (el.parentNode !== list) list.append(el);
  }

  // The board's workflow, drawn; the cards go to their columns again.
  async function readColumns() {
    let cols;
    try { cols = await loadColumns(boardId); } catch (e) {
      if (alive) toast(`The board's columns could not be read: ${e.message}`, 'error');
      return;
    }
    if (!alive || !Array.isArray(cols) || cols.length === 0) return;
    columns.draw(cols);
    for (const [, c] of cards) place(c.el, c.task);
    enhanceColumns(colWrap);
    sortColumns();
  }

  // A card dropped on a column: a plain column of a state takes the state
  // (as the state select does); any other enters the column, its limit and
  // automation applying.
  async function dropTask(id, column) {
    const c = cards.get(id);
    if (!c) return;
    if (columns.isPlain(column)) { moveTask(id, column.state); return; }
    if (c.task.column_id === column.id) return;
    try {
      const moved = await api.moveTask(id, column.id, c.task.version);
      if (moved && moved.queued) toast(`“${column.name}” is full: the card waits in its queue`);
    } catch (e) {
      toast(`Cannot move “${c.task.title}” to ${column.name}: ${e.message}`, 'error');
    }
  }

  // Sorted by position, filtered, counted (the count is what shows).
  function sortColumns() {
    let visible = 0;
    for (const c of columns.list) {
      const els = [...c.list.children];
      els.sort((a, b) => {
        const ta = cards.get(a.dataset.taskId)?.task, tb = cards.get(b.dataset.taskId)?.task;
        // Queued cards after those in the column, in the order they wait.
        return (ta?.queued ? 1 : 0) - (tb?.queued ? 1 : 0)
          || (Number(ta?.position) || 0) - (Number(tb?.position) || 0) || String(ta?.created_at).localeCompare(String(tb?.created_at));
      });
      els.forEach((e, i) => { if (c.list.children[i] !== e) c.list.insertBefore(e, c.list.children[i] || null); });
      let shown = 0;
      let queued = 0;
      for (const e of els) {
        const t = cards.get(e.dataset.taskId)?.task;
        e.hidden = !!t && !filter.matches(t);
        if (!e.hidden) shown++;
        if (!e.hidden && t?.queued) queued++;
      }
      visible += shown;
      columns.count(c, shown, els.length, queued);
    }
    filter.report(visible, cards.size);
  }

  // One card as the server has it now (unless a move of it is in flight).
  function upsert(t) {
    if (pending.has(t.id)) return;
    const key = cardKey(t);
    const cur = cards.get(t.id);
    if (cur && cur.key === key) return;
    const focused = cur && cur.el.contains(document.activeElement) ? document.activeElement.dataset.testid : null;
    const el = renderCard(t);
    if (cur) cur.el.replaceWith(el);
    cards.set(t.id, { el, task: t, key });
    place(el, t);
    if (focused) el.querySelector(`[data-testid="${focused}"]`)?.focus();
  }

  function removeCard(id) {
    const c = cards.get(id);
    if (c) { c.el.remove(); cards.delete(id); }
    statuses.delete(id);
  }

  function afterChange() {
    filter.options([...cards.values()].map((c) => c.task));
    sortColumns();
  }

  // The board's live stream: a snapshot replaces every card, then each
  // card comes as it changes.
  function onPush(msg) {
    if (!alive) return;
    if (msg.type === 'snapshot') {
      const fresh = Array.isArray(msg.cards) ? msg.cards : [];
      statuses.clear();
      for (const c of fresh) statuses.set(c.task.id, c.execution);
      const seen = new Set(fresh.map((c) => c.task.id));
      for (const c of fresh) upsert(c.task);
      for (const id of [...cards.keys()]) if (!seen.has(id) && !pending.has(id)) removeCard(id);
      seeCards(boardId, fresh);
    } else if (msg.type === 'card' && msg.card && msg.card.task) {
      statuses.set(msg.card.task.id, msg.card.execution);
      upsert(msg.card.task);
      seeCards(boardId, [msg.card]);
    } else if (msg.type === 'removed' && msg.task_id) {
      if (!pending.has(msg.task_id)) removeCard(msg.task_id);
    } else return;
    debug.boardPushes = (debug.boardPushes || 0) + 1;
    debug.boardLastSeq = msg.seq;
    afterChange();
  }

  function onStatus(status) {
    if (!alive) return;
    updated.dataset.status = status;
    updated.textContent = status === 'open' ? 'Live' : status === 'closed' ? '' : 'Reconnecting…';
  }

  async function moveTask(id, state) {
    const c = cards.get(id);
    if (!c) return;
    const from = taskState(c.task);
    if (from === state) return;
    pending.add(id);
    place(c.el, c.task, state); // optimistic
    c.el.dataset.state = state;
    const sel = c.el.querySelector('select');
    if (sel) sel.value = state;
    sortColumns();
    try {
      const t = await api.setState(id, state);
      pending.delete(id);
      if (t && t.id) upsert(t);
      afterChange();
    } catch (e) {
      pending.delete(id);
      place(c.el, c.task); // snap back
      c.el.dataset.state = from;
      if (sel) sel.value = from;
      sortColumns();
      c.el.classList.add('refused');
      setTimeout(() => c.el.classList.remove('refused'), 1200);
      toast(`Cannot move “${c.task.title}” to ${STATE_LABELS[state]}: ${e.message}`, 'error');
    }
  }

  async function createTask() {
    const sent = await taskDialog(null, (body) => api.createTask(boardId, body));
    if (!sent) return;
    toast('Task created.'); // its card is pushed
  }

  async function editTask(id) {
    const c = cards.get(id);
    if (!c) return;
    await taskDialog(c.task, (body) => api.updateTask(id, body)); // the change is pushed
  }

  async function deleteTask(id) {
    const c = cards.get(id);
    if (!c) return;
    if (!(await confirmDialog('Delete task', `Delete “${c.task.title}”? This cannot be undone.`))) return;
    try { await api.deleteTask(id); removeCard(id); afterChange(); } catch (e) { toast(`Could not delete: ${e.message}`, 'error'); }
  }

  api.board(boardId).then((b) => {
    if (!alive) return;
    board = b;
    title.textContent = b.name || 'Board';
    document.title = `${b.name} · Kandev`;
    setCrumbs([{ href: '#/boards', text: 'Boards' }, { text: b.name }]);
  }).catch((e) => {
    if (alive && e.status === 404) { toast('This board no longer exists.', 'error'); location.hash = '#/boards'; }
  });
  setCrumbs([{ href: '#/boards', text: 'Boards' }]);
  const live = new BoardSocket(boardId, { onMessage: onPush, onStatus });
  const unfollow = followBoard(boardId);
  debug.boardSocket = live;
  live.open();
  sortColumns();
  readColumns();

  return () => {
    alive = false;
    live.close();
    unfollow();
    void board;
  };
}
