// Follow-ups waiting for the agent's turn to end. A follow-up sent while the
// run is busy is held by the orchestrator (GET/PUT/DELETE
// /orchestrator/tasks/{id}/pending-prompts/...), so it survives a reload
// and goes even when no page is open: shown above the prompt box as
// "Queued — sent when the agent finishes this turn", editable and
// cancellable by the person who sent it until it goes.

import { h, clear, toast, fmtTime } from './dom.js';
import { auth, get, del, request, enc } from './api.js';

const base = (taskId) => `/orchestrator/tasks/${enc(taskId)}/pending-prompts`;

/** The held follow-ups of `taskId`, in the order they go. */
export async function pendingPrompts(taskId) {
  const data = await get(base(taskId));
  return Array.isArray(data && data.pending_prompts) ? data.pending_prompts : [];
}

/**
 * The box of held follow-ups. `set(list, busy)` shows `list` (busy: a turn
 * runs, so they go when it ends; else when the agent next runs); `changed`
 * is called after an edit or a cancel.
 */
export function pendingBox(taskId, { changed }) {
  const el = h('div', { class: 'pending-prompts', testid: 'pending-prompts', hidden: true, 'aria-live': 'polite' });
  let shownKey = null;
  let editing = null;   // the id being edited: not redrawn under the person's hands

  function set(list, busy) {
    const key = JSON.stringify([busy, list.map((p) => [p.id, p.text, p.author])]);
    if (key === shownKey || editing) return;
    shownKey = key;
    el.hidden = !list.length;
    clear(el).append(...list.map((p) => item(p, busy)));
  }

  function item(p, busy) {
    const mine = p.author === auth.user;
    const when = busy ? 'sent when the agent finishes this turn' : 'sent when the agent next runs';
    const text = h('div', { class: 'pending-text plain', testid: 'pending-prompt-text' }, p.text);
    const actions = h('div', { class: 'pending-actions' },
      mine ? h('button', { type: 'button', class: 'btn btn-small', testid: 'pending-prompt-edit', onclick: () => edit(p, row) }, 'Edit') : null,
      mine ? h('button', { type: 'button', class: 'btn btn-small btn-danger-ghost', testid: 'pending-prompt-cancel', onclick: () => cancel(p, row) }, 'Cancel') : null);
    const row = h('div', { class: 'pending-prompt', testid: 'pending-prompt', dataset: { id: p.id } },
      h('div', { class: 'pending-head' },
        h('span', { class: 'badge pending-badge', testid: 'pending-prompt-state' }, `Queued — ${when}`),
        h('span', { class: 'muted small' }, `${mine ? 'you' : p.author}, ${fmtTime(p.queued_at)}`)),
      text, actions);
    return row;
  }

  function edit(p, row) {
    editing = p.id;
    const area = h('textarea', { class: 'prompt-input', rows: 2, testid: 'pending-prompt-input', 'aria-label': 'Queued follow-up' });
    area.value = p.text;
    const done = () => { editing = null; shownKey = null; changed(); };
    const save = h('button', { type: 'button', class: 'btn btn-small btn-primary', testid: 'pending-prompt-save', onclick: async () => {
      const text = area.value.trim();
      if (!text) { toast('A queued follow-up cannot be blank: cancel it instead.', 'error'); return; }
      save.disabled = true;
      try {
        await request('PUT', `${base(taskId)}/${enc(p.id)}`, { text });
        toast('Queued follow-up changed.');
      } catch (e) { toast(`Could not change it: ${e.message}`, 'error'); }
      done();
    } }, 'Save');
    const discard = h('button', { type: 'button', class: 'btn btn-small', testid: 'pending-prompt-discard', onclick: done }, 'Keep as it was');
    clear(row).append(area, h('div', { class: 'pending-actions' }, save, discard));
    area.focus();
  }

  async function cancel(p, row) {
    row.querySelectorAll('button').forEach((b) => { b.disabled = true; });
    try {
      await del(`${base(taskId)}/${enc(p.id)}`);
      toast('Queued follow-up cancelled: it will not be sent.');
    } catch (e) { toast(`Could not cancel it: ${e.message}`, 'error'); }
    shownKey = null;
    changed();
  }

  return { el, set, get editing() { return editing; } };
}
