// Shared bits: states, execution status badges, the task form.

import { h, field, dialog } from './dom.js';
import { api } from './api.js';

export const STATES = ['TODO', 'IN_PROGRESS', 'REVIEW', 'BLOCKED', 'WAITING_FOR_INPUT', 'COMPLETED', 'FAILED', 'CANCELLED'];
export const STATE_LABELS = {
  TODO: 'To do', IN_PROGRESS: 'In progress', REVIEW: 'Review', BLOCKED: 'Blocked',
  WAITING_FOR_INPUT: 'Waiting for input', COMPLETED: 'Completed', FAILED: 'Failed', CANCELLED: 'Cancelled',
};

export function execState(status) {
  if (!status) return 'none';
  const s = status.state ?? status.execution_state ?? status.status ?? 'none';
  return String(s).toLowerCase().replace(/^execution_state_/, '');
}

export const ACTIVE_EXEC = new Set(['queued', 'launching', 'starting', 'running', 'retry_wait', 'retrying', 'stopping']);

/** {text, cls} for an execution status, or null when there's nothing to say. */
export function execBadge(status) {
  const st = execState(status);
  switch (st) {
    case 'queued': return { text: status.queue_position ? `Queued #${status.queue_position}` : 'Queued', cls: 'queued' };
    case 'launching': case 'starting': return { text: 'Starting', cls: 'running' };
    case 'running': return { text: 'Running', cls: 'running' };
    case 'retry_wait': case 'retrying': return { text: `Retrying (attempt ${status.attempts || 1})`, cls: 'queued' };
    case 'failed': return { text: status.last_error ? `Failed: ${status.last_error}` : 'Failed', cls: 'failed' };
    case 'stopped': return { text: 'Stopped', cls: 'muted' };
    case 'completed': return { text: 'Done', cls: 'done' };
    default: return null;
  }
}

let agentTypesCache = null;
export async function agentTypes() {
  if (!agentTypesCache) {
    agentTypesCache = api.agentTypes().catch(() => { agentTypesCache = null; return []; });
  }
  return agentTypesCache;
}
export function agentTypeId(t) { return typeof t === 'string' ? t : t.id || t.agent_type || t.key || t.name || ''; }
export function agentTypeLabel(t) { return typeof t === 'string' ? t : t.name || t.display_name || t.id || ''; }

/** Create/edit task dialog. Resolves with the body to send, or null. */
export async function taskDialog(task) {
  const types = await agentTypes();
  const title = h('input', { name: 'title', required: true, maxlength: 500, testid: 'task-title', value: task?.title || '' });
  const desc = h('textarea', { name: 'description', rows: 5, testid: 'task-description' });
  desc.value = task?.description || '';
  const agent = h('select', { name: 'agent_type', testid: 'task-agent-type' },
    h('option', { value: '' }, '— none —'),
    types.filter((t) => t.enabled !== false).map((t) => h('option', { value: agentTypeId(t), title: t.description || undefined }, agentTypeLabel(t))));
  const current = task?.agent_type || (types.length ? agentTypeId(types[0]) : '');
  if (current && ![...agent.options].some((o) => o.value === current)) agent.append(h('option', { value: current }, current));
  agent.value = current;
  const repo = h('input', { name: 'repository_url', type: 'text', inputmode: 'url', testid: 'task-repository', value: task?.repository_url || '', placeholder: 'https://github.com/org/repo.git' });
  const branch = h('input', { name: 'branch', testid: 'task-branch', value: task?.branch || '', placeholder: 'main' });
  const prio = h('input', { name: 'priority', type: 'number', min: 0, max: 1000, step: 1, testid: 'task-priority', value: task?.priority ?? 0 });
  const body = h('div', { class: 'form-grid' },
    field('Title', title), field('Description (the agent’s prompt)', desc),
    field('Agent type', agent), field('Priority', prio),
    field('Repository URL', repo), field('Branch', branch));
  const v = await dialog({ title: task ? 'Edit task' : 'New task', body, submitLabel: task ? 'Save' : 'Create task', testid: 'task-dialog' });
  if (!v) return null;
  const out = {
    title: v.title.trim(),
    description: v.description,
    priority: Number.parseInt(v.priority, 10) || 0,
    repository_url: v.repository_url.trim(),
    branch: v.branch.trim(),
  };
  out.agent_type = v.agent_type || null;
  return out;
}
