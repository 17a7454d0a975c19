// The task page's History tab: the agent runs seen in the feed (one row
// per instance: when, how many turns, how the last one ended, its logs)
// and the task's changes (GET /tasks/{id}/events), in words.

import { h, clear, fmtTime, labelCells } from './dom.js';
import { api } from './api.js';
import { stopWords } from './feedwords.js';
import { STATE_LABELS } from './common.js';

// A task change, in words: what happened, and what changed (the fields by
// name, never counted).
const CHANGE_WORDS = { created: 'Created', updated: 'Edited', state_changed: 'Moved', deleted: 'Deleted' };
const FIELD_WORDS = {
  title: 'title', description: 'description', priority: 'priority', agent_type: 'agent type',
  repository_url: 'repository', branch: 'branch', metadata: 'run details', position: 'position',
  workspace_path: 'workspace', max_retries: 'retries', autostart: 'start on creation',
};

/** "a", "a and b", "a, b and c". */
function listWords(words) {
  return words.length < 2 ? words.join('') : `${words.slice(0, -1).join(', ')} and ${words[words.length - 1]}`;
}

function describeChange(e) {
  const pick = (v) => (v && typeof v === 'object' ? v.state ?? v.to ?? null : v);
  if (e.kind === 'state_changed') {
    const from = pick(e.old_value), to = pick(e.new_value);
    const reason = (e.new_value && e.new_value.reason) || '';
    const label = (s) => (s ? STATE_LABELS[String(s).replace(/^TASK_STATE_/, '')] || s : '?');
    return `${label(from)} → ${label(to)}${reason ? ` (${reason})` : ''}`;
  }
  if (e.kind === 'created') return e.new_value?.title ? `“${e.new_value.title}”` : '';
  if (e.kind === 'updated' && e.new_value && typeof e.new_value === 'object') {
    const names = Object.keys(e.new_value).map((k) => FIELD_WORDS[k]).filter(Boolean);
    return names.length ? `Changed the ${listWords(names)}` : '';
  }
  return '';
}

const head = (...names) => h('thead', null, h('tr', null, names.map((n) => h('th', { scope: 'col' }, n))));

/** The agent instances seen (`rows`); `onLogs(instanceId)` opens one's logs. */
function runsTable(model, rows, onLogs) {
  const attempts = model.status?.attempts ?? rows.length;
  return h('table', { class: 'table', testid: 'attempts' },
    h('caption', null, `Agent instances (${attempts} attempt${attempts === 1 ? '' : 's'})`),
    head('#', 'Instance', 'Started', 'Last activity', 'Turns', 'How the last turn ended', 'Logs'),
    h('tbody', null, rows.map((r, i) => h('tr', { testid: 'attempt-row' },
      h('td', null, String(i + 1)), h('td', null, h('code', { class: 'small' }, r.instanceId)), h('td', null, fmtTime(r.first)), h('td', null, fmtTime(r.last)),
      h('td', null, String(r.turns)), h('td', { title: r.stopReason || undefined }, r.stopReason ? stopWords(r.stopReason) : '—'),
      h('td', null, h('button', { type: 'button', class: 'btn btn-small', onclick: () => onLogs(r.instanceId) }, 'Logs'))))));
}

function eventsTable(events) {
  return h('table', { class: 'table', testid: 'task-events' },
    h('caption', null, 'Task changes'),
    head('When', 'What', 'Who', 'Details'),
    h('tbody', null, events.map((e) => h('tr', { testid: 'task-event-row' },
      h('td', null, fmtTime(e.created_at || e.occurred_at || e.at)),
      h('td', null, CHANGE_WORDS[e.kind] || String(e.kind || '')),
      h('td', null, String(e.actor || '')),
      h('td', null, describeChange(e))))));
}

/** The History panel of `model` (taskstate.js); `onLogs(instanceId)` shows a run's logs. */
export function historyPanel(model, { onLogs }) {
  const box = h('div', { class: 'history', testid: 'history' });
  const el = h('div', { class: 'panel', id: 'panel-history', role: 'tabpanel', 'aria-labelledby': 'tab-history', hidden: true }, box);
  async function load() {
    clear(box).append(h('p', { class: 'muted' }, 'Loading…'));
    const rows = model.knownRuns();
    const runs = runsTable(model, rows, onLogs);
    let events = [];
    try { events = await api.taskEvents(model.taskId); } catch { /* shown as empty */ }
    if (!model.alive) return;
    clear(box).append(rows.length ? labelCells(runs) : h('p', { class: 'muted' }, 'No agent runs seen yet.'), labelCells(eventsTable(events)));
  }
  return { el, load };
}
