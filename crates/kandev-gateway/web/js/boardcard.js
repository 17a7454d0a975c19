// A card on the board: the task's title, agent, priority, what its
// execution adds to its state (queued, running, waiting for a person),
// why it is blocked, its family, repository, branch and pull request, the
// CI checks, and its actions (state select, Move, Edit, Blocked by…,
// Delete). Cards are draggable to another column.

import { h } from './dom.js';
import { taskState } from './api.js';
import { STATE, STATES, STATE_LABELS, execBadge, execState } from './common.js';
import { checksBadge, checksKey } from './checks.js';

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

// "preparing the agent image …" while its build runs (agent.preparing);
// once built, the card no longer says it.
function preparing(t) {
  const said = t.metadata?.agent_image;
  return typeof said === 'string' && said.startsWith('preparing') ? said : null;
}

/** What a card shows of task `t` and its execution `s`: the card is drawn again when it changes. */
export function cardKey(t, s) {
  return JSON.stringify([t.title, t.agent_type, t.priority, taskState(t), t.version, preparing(t), s && [execState(s), s.queue_position, s.last_error, s.attempts],
    t.repository_url, t.branch, t.metadata?.delivered, t.column_id, t.queued, t.blocked, t.blocked_reason,
    t.parent_id, (t.subtasks || []).length, checksKey(t)]);
}

/** The chips under the title, and the callout of a task waiting for a person. */
function cardMeta(t, status) {
  const badge = execBadge(status, taskState(t));
  const exec = execState(status);
  return [
    h('div', { class: 'card-meta' },
      t.agent_type ? h('span', { class: 'chip', testid: 'card-agent' }, t.agent_type) : h('span', { class: 'chip muted' }, 'no agent'),
      h('span', { class: 'chip', testid: 'card-priority', title: 'Priority' }, `P${t.priority ?? 0}`),
      t.queued ? h('span', { class: 'chip chip-queued', testid: 'card-queued', title: 'The column is full: this card waits its turn' }, 'Queued') : null,
      badge && badge.cls !== 'attention' ? h('span', { class: `badge exec-${badge.cls}`, testid: 'card-status', dataset: { exec }, title: badge.text }, badge.text) : null,
      checksBadge(t)),
    // What the task waits for, in full: a person has to act.
    badge && badge.cls === 'attention' ? h('p', { class: 'card-callout exec-attention', testid: 'card-status', dataset: { exec }, title: badge.title }, badge.text) : null,
  ];
}

/** The notes under them: the image being prepared, why it is blocked, its parent or subtasks. */
function cardNotes(t, parentTitle) {
  return [
    preparing(t) && taskState(t) === STATE.IN_PROGRESS ? h('p', { class: 'card-note', testid: 'card-preparing' }, preparing(t)) : null,
    // Held until its blockers complete: why, in the server's words.
    t.blocked ? h('p', { class: 'card-callout card-blocked', testid: 'card-blocked', title: t.blocked_reason }, `Blocked: ${t.blocked_reason || 'waiting for other tasks'}`) : null,
    t.parent_id || (t.subtasks || []).length ? h('p', { class: 'card-note', testid: 'card-family' },
      t.parent_id ? `Subtask of “${parentTitle || 'another task'}”` : `${t.subtasks.length} subtask${t.subtasks.length === 1 ? '' : 's'}`) : null,
  ];
}

/** The state select and the buttons; `on` has the actions: move(state), column, edit, blockers, remove. */
function cardActions(t, on) {
  const select = h('select', { class: 'state-select', testid: 'card-state-select', 'aria-label': `State of ${t.title}` },
    STATES.map((s) => h('option', { value: s }, STATE_LABELS[s])));
  select.value = taskState(t);
  select.addEventListener('change', () => on.move(select.value));
  const button = (testid, label, onclick, text, cls = 'btn btn-small') => h('button', { type: 'button', class: cls, testid, 'aria-label': label, onclick }, text);
  return h('div', { class: 'card-actions' },
    select,
    button('card-move', `Move ${t.title} to a column`, on.column, 'Move'),
    button('card-edit', `Edit ${t.title}`, on.edit, 'Edit'),
    button('card-blockers', `Tasks ${t.title} waits for`, on.blockers, 'Blocked by…'),
    button('card-delete', `Delete ${t.title}`, on.remove, 'Delete', 'btn btn-small btn-danger-ghost'));
}

/**
 * The card of task `t` with execution `status`; `parentTitle`: its
 * parent's title, when on the board; `on`: the actions (see cardActions).
 */
export function renderCard(t, status, parentTitle, on) {
  const el = h('li', { class: `card prio-${t.priority > 0 ? 'high' : 'normal'}`, testid: 'card', draggable: 'true',
    dataset: { taskId: t.id, state: taskState(t) } },
    h('a', { class: 'card-title', href: `#/tasks/${encodeURIComponent(t.id)}`, testid: 'card-link' }, t.title || '(untitled)'),
    ...cardMeta(t, status),
    ...cardNotes(t, parentTitle),
    repoLine(t),
    cardActions(t, on));
  el.addEventListener('dragstart', (e) => {
    e.dataTransfer.setData('text/x-kandev-task', t.id);
    e.dataTransfer.effectAllowed = 'move';
    el.classList.add('dragging');
  });
  el.addEventListener('dragend', () => el.classList.remove('dragging'));
  return el;
}
