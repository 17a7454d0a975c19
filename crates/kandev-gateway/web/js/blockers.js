// "Blocked by" (issue 41): the tasks of the same board a task waits for,
// chosen in a dialog and replaced at once (PUT /tasks/{id}/blockers). The
// server refuses a cycle, a task of another board or the task itself with a
// message that says which; the dialog shows it.

import { h, dialog, toast } from './dom.js';
import { request } from './api.js';

/** Asks which of `tasks` (the board's) `task` waits for, and saves it. */
export async function editBlockers(task, tasks) {
  const current = new Set((task.blocked_by || []).map((b) => b.id));
  const others = tasks.filter((t) => t.id !== task.id)
    .sort((a, b) => String(a.title).localeCompare(String(b.title)));
  const boxes = others.map((t) => h('label', { class: 'check', testid: 'blocker-option', dataset: { taskId: t.id } },
    h('input', { type: 'checkbox', name: `blocker.${t.id}`, value: 'on', checked: current.has(t.id) ? true : undefined }),
    ` ${t.title || '(untitled)'}`));
  const body = others.length
    ? h('fieldset', { class: 'blockers' }, h('legend', null, `“${task.title}” starts once these complete`), ...boxes)
    : h('p', { class: 'muted' }, 'No other task on this board.');
  const saved = await dialog({
    title: 'Blocked by', testid: 'blockers', submitLabel: 'Save', body,
    onSubmit: async (values) => {
      const ids = others.filter((t) => values[`blocker.${t.id}`] === 'on').map((t) => t.id);
      try {
        await request('PUT', `/tasks/${encodeURIComponent(task.id)}/blockers`, { blocked_by: ids });
        return null;
      } catch (e) { return e.message; }
    },
  });
  if (saved) toast('Blockers saved', 'success');
  return !!saved;
}
