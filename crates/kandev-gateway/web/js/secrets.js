// The caller's own secrets (API keys, forge tokens) for their agents,
// through /api/v1/users/me/secrets. Values are written, never read back:
// the list shows names and when each was set. A run gets a secret when its
// agent type lists the name in its required or optional env.

import { h, clear, toast, dialog, field, confirmDialog, timeEl, labelCells } from './dom.js';
import { api } from './api.js';
import { invalidateAgentTypes } from './common.js';

const nameOk = (n) => /^[A-Za-z_][A-Za-z0-9_]{0,127}$/.test(n);

/** Asks for a name (unless given) and a value; resolves with the name once saved. */
function setDialog(name) {
  const nameInput = h('input', { name: 'name', value: name || '', required: true, maxlength: 128, autocomplete: 'off',
    testid: 'secret-name', readonly: name ? true : undefined, placeholder: 'ANTHROPIC_API_KEY' });
  const value = h('input', { name: 'value', type: 'password', required: true, autocomplete: 'off', testid: 'secret-value' });
  const body = h('div', null,
    field('Name', nameInput, 'The environment variable your agents receive.'),
    field('Value', value, 'Stored encrypted; it is never shown again.'));
  return dialog({
    title: name ? `Replace ${name}` : 'New secret', body, submitLabel: 'Save', testid: 'secret-dialog',
    onSubmit: async (v) => {
      const n = (v.name || '').trim();
      if (!nameOk(n)) return 'The name is an environment variable name: letters, digits and _, not starting with a digit.';
      if (!v.value) return 'The value must not be empty.';
      await api.setSecret(n, v.value);
      return null;
    },
  }).then((v) => (v ? v.name.trim() : null));
}

export function secretsView(main, { setCrumbs }) {
  let alive = true;
  document.title = 'Secrets · Kandev';
  setCrumbs([{ href: '#/boards', text: 'Boards' }, { text: 'Secrets' }]);
  const rows = h('tbody');
  const newBtn = h('button', { type: 'button', class: 'btn btn-primary', testid: 'secret-new', onclick: () => edit(null) }, '+ New secret');
  const table = h('table', { class: 'table', testid: 'secrets' },
    h('thead', null, h('tr', null, ['Name', 'Set', ''].map((c) => h('th', { scope: 'col' }, c)))), rows);
  clear(main).append(
    h('div', { class: 'page-head' }, h('h1', { class: 'page-title' }, 'Your secrets'), h('div', { class: 'page-actions' }, newBtn)),
    h('p', { class: 'muted small' }, 'Your agents get these as environment variables when their agent type asks for the name. ',
      'Nobody else’s agents get them, and nobody, you included, can read a value back.'),
    h('div', { class: 'table-wrap' }, table));

  async function edit(name) {
    const saved = await setDialog(name);
    if (!saved) return;
    // What the agent types still need depends on your secrets.
    invalidateAgentTypes();
    toast(`Secret “${saved}” saved.`);
    await load();
  }

  async function remove(name) {
    if (!(await confirmDialog(`Delete ${name}?`, 'Your next runs will not get it.'))) return;
    try { await api.deleteSecret(name); toast(`Secret “${name}” deleted.`); } catch (e) { toast(`Could not delete “${name}”: ${e.message}`, 'error'); }
    invalidateAgentTypes();
    await load();
  }

  async function load() {
    let secrets;
    try { secrets = await api.secrets(); } catch (e) {
      if (alive) clear(rows).append(h('tr', null, h('td', { colspan: 3, class: 'form-error' }, `Could not load your secrets: ${e.message}`)));
      return;
    }
    if (!alive) return;
    if (!secrets.length) {
      clear(rows).append(h('tr', null, h('td', { colspan: 3, class: 'muted', testid: 'secrets-empty' }, 'No secrets yet.')));
      return;
    }
    clear(rows).append(...secrets.map((s) => h('tr', { testid: 'secret-row', dataset: { name: s.name } },
      h('td', null, h('code', null, s.name)),
      h('td', null, timeEl(s.updated_at)),
      h('td', { class: 'row-actions' },
        h('button', { type: 'button', class: 'btn btn-small', testid: 'secret-replace', 'aria-label': `Replace ${s.name}`, onclick: () => edit(s.name) }, 'Replace'),
        h('button', { type: 'button', class: 'btn btn-small btn-danger-ghost', testid: 'secret-delete', 'aria-label': `Delete ${s.name}`, onclick: () => remove(s.name) }, 'Delete')))));
    labelCells(table);
  }
  load();
  return () => { alive = false; };
}
