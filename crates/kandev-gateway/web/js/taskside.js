// The task page's side column: the agent's plan, the execution (its state
// in words, attempts, queue position, instance, agent image, last error),
// the context usage, the CI checks and the task's details.

import { h, clear, fmtTime } from './dom.js';
import { renderMarkdown } from './markdown.js';
import { renderPlan } from './feedparts.js';
import { checksPanel } from './checks.js';
import { EXEC, NO_EXEC, plainError } from './common.js';

/** An execution state in the words of the Execution section. */
const EXEC_WORDS = {
  [NO_EXEC]: 'Never started', [EXEC.IDLE]: 'Idle', [EXEC.QUEUED]: 'Queued', [EXEC.LAUNCHING]: 'Starting', [EXEC.RUNNING]: 'Running',
  [EXEC.RETRY_WAIT]: 'Waiting to retry', [EXEC.COMPLETED]: 'Finished', [EXEC.FAILED]: 'Failed', [EXEC.STOPPED]: 'Stopped',
};

function kv(k, v) { return [h('dt', null, k), h('dd', null, v)]; }

/** The task's description and facts; drawn again only when one changes. */
function renderDetails(details, task) {
  const delivered = task.metadata && typeof task.metadata.delivered === 'object' ? task.metadata.delivered : null;
  const key = JSON.stringify([task.description, task.agent_type, task.repository_url, task.branch, task.priority, task.version, delivered]);
  if (details.dataset.key === key) return;
  details.dataset.key = key;
  const desc = h('div', { class: 'md desc' });
  desc.innerHTML = renderMarkdown(task.description || ''); // escaped by renderMarkdown
  clear(details).append(desc, h('dl', { class: 'kv' },
    kv('Agent', task.agent_type || '—'), kv('Priority', String(task.priority ?? 0)),
    kv('Repository', task.repository_url || '—'), kv('Branch', task.branch || '—'),
    kv('Created', fmtTime(task.created_at)), kv('By', task.created_by || '—'),
    delivered ? kv('Delivered', `${delivered.branch} @ ${String(delivered.commit || '').slice(0, 12)}`) : null,
    /^https?:\/\//.test(delivered?.pull_request || '') ? kv('Pull request', h('a', { href: delivered.pull_request, rel: 'noopener noreferrer', target: '_blank', testid: 'pull-request-link' }, delivered.pull_request)) : null));
}

/** The Execution section; the last error only while the failure box does not show it. */
function renderExec(execInfo, model, failureShown) {
  const { task, status } = model;
  const lastError = status?.last_error && !failureShown;
  clear(execInfo).append(...[
    kv('State', EXEC_WORDS[model.exec] || model.exec), kv('Attempts', String(status?.attempts ?? 0)),
    status?.queue_position ? kv('Queue position', String(status.queue_position)) : null,
    status?.instance_id ? kv('Instance', status.instance_id) : null,
    // The agent's image: "preparing the agent image … (step)", then how
    // long its build took (agent.preparing, kept in the metadata).
    typeof task.metadata?.agent_image === 'string' ? kv('Agent image', task.metadata.agent_image) : null,
    lastError ? kv('Last error', plainError(status.last_error).short) : null].flat().filter(Boolean));
  if (lastError) { execInfo.lastElementChild?.classList.add('error-text'); execInfo.lastElementChild.title = status.last_error; }
}

/** The side column of task `taskId`; `onFixed`: a Fix CI follow-up went. */
export function taskSide(taskId, { onFixed }) {
  const planBox = h('div', { class: 'side-plan', testid: 'plan' }, h('p', { class: 'muted' }, 'No plan yet.'));
  const details = h('div', { class: 'side-details', testid: 'task-details' });
  const execInfo = h('dl', { class: 'kv', testid: 'exec-info' });
  const usageEl = h('p', { class: 'muted small', testid: 'usage' });
  const checks = checksPanel(taskId, { onFixed });
  const el = h('aside', { class: 'task-side', 'aria-label': 'Task details' },
    h('section', null, h('h2', null, 'Plan'), planBox),
    h('section', null, h('h2', null, 'Execution'), execInfo, usageEl),
    checks.el,
    h('section', null, h('h2', null, 'Details'), details));
  return {
    el,
    render(model, failureShown) {
      checks.update(model.task);
      renderDetails(details, model.task);
      renderExec(execInfo, model, failureShown);
    },
    plan(entries) { clear(planBox).append(renderPlan(entries)); },
    usage(u) {
      if (!u) return;
      const pct = u.size ? Math.round((u.used / u.size) * 100) : 0;
      usageEl.textContent = `Context: ${u.used.toLocaleString()} / ${u.size.toLocaleString()} tokens (${pct}%)${u.cost_amount != null ? ` · cost ${u.cost_amount.toFixed(2)} ${u.cost_currency || ''}` : ''}`;
    },
  };
}
