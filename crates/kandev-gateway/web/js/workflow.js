// The board's workflow (issue 41): its columns, edited in one dialog, and a
// card moved into a column. A column maps to a task state; it may have a
// WIP limit (more cards wait in its queue) and automation: entering starts
// a run of an agent type with a prompt template ({title}, {description},
// {summary}: the previous step's), in the task's agent session or a new
// one, a finished run moves the card to the
// column chosen, a failed one to another. The server checks everything.

import { h, dialog, field, toast } from './dom.js';
import { get, post, request } from './api.js';
import { STATES, STATE_LABELS } from './common.js';

const columnsPath = (boardId) => `/boards/${encodeURIComponent(boardId)}/columns`;

export async function loadColumns(boardId) {
  return (await get(columnsPath(boardId))).columns;
}

function newId() {
  return crypto.randomUUID ? crypto.randomUUID() : ([1e7] + -1e3 + -4e3 + -8e3 + -1e11)
    .replace(/[018]/g, (c) => (c ^ (crypto.getRandomValues(new Uint8Array(1))[0] & (15 >> (c / 4)))).toString(16));
}

function select(name, options, value, label) {
  const el = h('select', { name, 'aria-label': label },
    options.map(([v, text]) => h('option', { value: v, selected: v === (value ?? '') ? true : undefined }, text)));
  return el;
}

// The profiles the caller may use, for the columns' pickers.
async function loadProfiles() {
  try { return (await get('/agent-profiles')).profiles || []; } catch { return []; }
}

// One editable row: a column's fields, named `<field>.<index>`.
function columnRow(c, i, all, remove, profiles) {
  const targets = [['', '(stay)'], ...all.map((o) => [o.id, o.name])];
  const row = h('fieldset', { class: 'workflow-column', testid: 'workflow-column', dataset: { id: c.id } },
    h('legend', null, `Column ${i + 1}`),
    field('Name', h('input', { name: `name.${i}`, value: c.name, required: true, maxlength: '100' })),
    field('State', select(`state.${i}`, STATES.map((s) => [s, STATE_LABELS[s]]), c.state, 'State')),
    field('Colour', h('input', { name: `colour.${i}`, value: c.colour || '', placeholder: '#rrggbb' })),
    field('WIP limit', h('input', { name: `wip_limit.${i}`, type: 'number', min: '1', value: c.wip_limit ?? '' }), 'empty: no limit'),
    field('Agent type on enter', h('input', { name: `agent_type.${i}`, value: c.agent_type || '', placeholder: 'none' })),
    field('Prompt template', h('textarea', { name: `prompt_template.${i}`, rows: '2' }, c.prompt_template || ''),
      '{title}, {description}, {summary} (the previous step\'s), {diff} (the changes so far)'),
    field('Agent profile', select(`profile_id.${i}`,
      [['', '(the task\'s own)'], ...profiles.map((p) => [p.id, `${p.name} (${p.agent_type})`])], c.profile_id, 'Agent profile'),
      'one of the agent type\'s profiles: model, mode, instructions, MCP servers'),
    field('Session', h('label', { class: 'check' },
      h('input', { type: 'checkbox', name: `new_session.${i}`, value: 'on', checked: c.new_session ? true : undefined }),
      ' Start a new agent session'), 'unticked: the run continues the task\'s session'),
    field('When its run finishes', select(`on_success.${i}`, targets, c.on_success, 'On success')),
    field('When its run fails', select(`on_failure.${i}`, targets, c.on_failure, 'On failure')),
    h('button', { type: 'button', class: 'btn btn-small btn-danger-ghost', testid: 'workflow-remove', onclick: () => remove(i) }, 'Remove'));
  return row;
}

function fromForm(values, cols) {
  return cols.map((c, i) => {
    const wip = values[`wip_limit.${i}`];
    const text = (k) => (values[`${k}.${i}`] || '').trim();
    return {
      id: c.id,
      name: text('name'),
      state: values[`state.${i}`],
      colour: text('colour'),
      wip_limit: wip === '' || wip === undefined ? null : Number(wip),
      agent_type: text('agent_type') || null,
      prompt_template: values[`prompt_template.${i}`] || '',
      new_session: values[`new_session.${i}`] === 'on',
      profile_id: text('profile_id') || null,
      on_success: text('on_success') || null,
      on_failure: text('on_failure') || null,
    };
  });
}

// Opens the editor of the board's columns; resolves true once saved.
export async function editWorkflow(boardId) {
  let cols = await loadColumns(boardId);
  const profiles = await loadProfiles();
  const list = h('div', { class: 'workflow-columns', testid: 'workflow-columns' });
  const draw = () => {
    list.replaceChildren(...cols.map((c, i) => columnRow(c, i, cols, (k) => { cols = cols.filter((_, j) => j !== k); draw(); }, profiles)));
  };
  const add = h('button', { type: 'button', class: 'btn btn-small', testid: 'workflow-add', onclick: () => {
    cols = [...cols, { id: newId(), name: 'New column', state: STATES[0] }];
    draw();
  } }, '+ Column');
  draw();
  const saved = await dialog({
    title: 'Workflow', testid: 'workflow', wide: true, submitLabel: 'Save',
    body: h('div', null, list, add),
    onSubmit: async (values) => {
      try {
        await request('PUT', columnsPath(boardId), { columns: fromForm(values, cols) });
        return null;
      } catch (e) { return e.message; }
    },
  });
  if (saved) toast('Workflow saved', 'success');
  return !!saved;
}

// Asks which column a card goes to, and moves it there.
export async function moveToColumn(boardId, task) {
  const cols = await loadColumns(boardId);
  const options = cols.map((c) => [c.id, c.wip_limit ? `${c.name} (WIP ${c.wip_limit})` : c.name]);
  const picked = await dialog({
    title: `Move “${task.title}”`, testid: 'move-column', submitLabel: 'Move',
    body: field('Column', select('column_id', options, task.column_id, 'Column')),
    onSubmit: async (values) => {
      try {
        const moved = await post(`/tasks/${encodeURIComponent(task.id)}/move`, { column_id: values.column_id, version: task.version });
        if (moved.queued) toast('The column is full: the card waits in its queue');
        return null;
      } catch (e) { return e.message; }
    },
  });
  return !!picked;
}
