// Admin: the agent type registry. Lists every type (disabled ones too),
// creates, edits, enables and disables them through /api/v1/agent-types.
// The form checks what the agent manager checks (AgentType::validate), so
// most mistakes are caught before sending; the server's own message is
// shown for the rest.

import { h, clear, toast, dialog, field, labelCells } from './dom.js';
import { api } from './api.js';
import { invalidateAgentTypes } from './common.js';

const POLICIES = [
  ['ask', 'Ask a person'],
  ['auto_approve', 'Approve automatically'],
  ['deny', 'Deny automatically'],
];

const NEW_TYPE = {
  id: '', name: '', description: '', image: '', command: [], working_dir: '/workspace',
  memory_mb: 2048, cpu_cores: 1, pids_limit: 512, timeout_seconds: 3600,
  capabilities: ['acp', 'fs'], required_env: [], optional_env: [],
  credential_mounts: { ssh: false, gitconfig: false, git_credentials: false },
  network_mode: 'bridge', permission_policy: 'ask', enabled: true, home_volume: '', state_paths: [], internal: false,
  host_credentials: false,
};

const envNameOk = (n) => /^[A-Za-z_][A-Za-z0-9_]*$/.test(n);

function homeVolumeOk(path) {
  const trimmed = path.replace(/\/+$/, '');
  return path.startsWith('/') && trimmed !== '' && trimmed !== '/workspace' && !trimmed.startsWith('/workspace/')
    && !/[:,\0]/.test(path) && !path.split('/').some((p) => p === '..' || p === '.');
}

/** The server's checks (gateway + agent manager), in its words; null when fine. */
export function validateAgentType(t) {
  if (!t.id.trim() || !t.name.trim() || !t.image.trim()) return 'id, name and image must not be empty';
  if (t.id.length > 64 || !/^[a-z0-9._-]+$/.test(t.id) || /^[._-]/.test(t.id)) {
    return "id must be 1-64 lower-case letters, digits, '.', '_' or '-'";
  }
  if (t.image.startsWith('-')) return 'image is required';
  if (!t.working_dir.startsWith('/')) return 'working_dir must be an absolute path';
  if (!(t.memory_mb >= 16) || !(t.cpu_cores > 0) || !(t.pids_limit >= 1)) {
    return 'memory_mb must be at least 16, cpu_cores and pids_limit positive';
  }
  if (!(t.timeout_seconds >= 1)) return 'timeout_seconds must be at least 1';
  const bad = [...t.required_env, ...t.optional_env].find((n) => !envNameOk(n));
  if (bad !== undefined) return `${JSON.stringify(bad)} is not an environment variable name`;
  if (t.home_volume && !homeVolumeOk(t.home_volume)) {
    return "home_volume must be an absolute path in the container, without '..', ':' or ',', and not / or /workspace";
  }
  if (!t.network_mode.trim()) return 'network_mode is required (none, bridge, host or a network)';
  if (!POLICIES.some(([v]) => v === t.permission_policy)) {
    return `permission_policy ${JSON.stringify(t.permission_policy)} must be auto_approve, deny or ask`;
  }
  return null;
}

const list = (s) => String(s || '').split(/[\s,]+/).map((x) => x.trim()).filter(Boolean);
const lines = (s) => String(s || '').split('\n').map((x) => x.trim()).filter(Boolean);
const num = (s) => (String(s).trim() === '' ? NaN : Number(s));

/** The form's values as an AgentType body (only the writable fields). */
function fromForm(v) {
  return {
    id: (v.id || '').trim(),
    name: (v.name || '').trim(),
    description: (v.description || '').trim(),
    image: (v.image || '').trim(),
    command: lines(v.command),
    working_dir: (v.working_dir || '').trim(),
    memory_mb: num(v.memory_mb),
    cpu_cores: num(v.cpu_cores),
    pids_limit: num(v.pids_limit),
    timeout_seconds: num(v.timeout_seconds),
    capabilities: list(v.capabilities),
    required_env: list(v.required_env),
    optional_env: list(v.optional_env),
    credential_mounts: { ssh: v.mount_ssh === 'on', gitconfig: v.mount_gitconfig === 'on', git_credentials: v.mount_git_credentials === 'on' },
    network_mode: (v.network_mode || '').trim(),
    permission_policy: v.permission_policy,
    enabled: v.enabled === 'on',
    home_volume: (v.home_volume || '').trim(),
    state_paths: lines(v.state_paths),
    internal: v.internal === 'on',
    host_credentials: v.host_credentials === 'on',
  };
}

function check(name, on, label) {
  const box = h('input', { type: 'checkbox', name, testid: `at-${name}` });
  box.checked = !!on;
  return h('label', { class: 'check' }, box, ' ', label);
}

/** The create / edit form; resolves with the saved type or null. */
function typeDialog(current) {
  const t = { ...NEW_TYPE, ...(current || {}) };
  const mounts = t.credential_mounts || {};
  const input = (name, value, attrs = {}) => h('input', { name, value: value ?? '', testid: `at-${name}`, ...attrs });
  const command = h('textarea', { name: 'command', rows: 2, testid: 'at-command', placeholder: 'One argument per line; empty: the image’s entrypoint' });
  command.value = (t.command || []).join('\n');
  const statePaths = h('textarea', { name: 'state_paths', rows: 2, testid: 'at-state_paths', placeholder: '.claude/settings.local.json' });
  statePaths.value = (t.state_paths || []).join('\n');
  const policy = h('select', { name: 'permission_policy', testid: 'at-permission_policy' },
    POLICIES.map(([v, label]) => h('option', { value: v }, `${label} (${v})`)));
  policy.value = t.permission_policy || 'ask';
  const body = h('div', { class: 'form-grid form-grid-3' },
    field('Id', input('id', t.id, { required: true, maxlength: 64, pattern: '[a-z0-9][a-z0-9._\\-]*', readonly: current ? true : undefined }),
      current ? 'The id cannot change.' : 'Lower-case letters, digits, “.”, “_” or “-”.'),
    field('Name', input('name', t.name, { required: true })),
    field('Description', input('description', t.description)),
    field('Image', input('image', t.image, { required: true, placeholder: 'registry/image:tag' })),
    field('Command', command),
    field('Working directory', input('working_dir', t.working_dir, { required: true })),
    field('Memory (MB)', input('memory_mb', t.memory_mb, { type: 'number', min: 16, step: 1 })),
    field('CPU cores', input('cpu_cores', t.cpu_cores, { type: 'number', min: 0.1, step: 0.1 })),
    field('Process limit', input('pids_limit', t.pids_limit, { type: 'number', min: 1, step: 1 })),
    field('Timeout (seconds)', input('timeout_seconds', t.timeout_seconds, { type: 'number', min: 1, step: 1 })),
    field('Capabilities', input('capabilities', (t.capabilities || []).join(', ')), 'e.g. acp, fs, terminal'),
    field('Network', input('network_mode', t.network_mode), 'none, bridge, host or a network name'),
    field('Required env', input('required_env', (t.required_env || []).join(', ')), 'Names, comma-separated'),
    field('Optional env', input('optional_env', (t.optional_env || []).join(', ')), 'Names, comma-separated'),
    field('Permission policy', policy),
    field('Home volume', input('home_volume', t.home_volume, { placeholder: '/home/agent/.sessions' }), 'Kept across runs; empty for none'),
    field('State paths', statePaths, 'The agent’s own files in the workspace, left out of Changes and delivery: .gitignore patterns, one per line'),
    h('fieldset', { class: 'checks' }, h('legend', null, 'Options'),
      check('enabled', t.enabled !== false, 'Enabled'),
      check('internal', t.internal, 'Internal (hidden from the picker)'),
      check('mount_ssh', mounts.ssh, 'Mount ~/.ssh'),
      check('mount_gitconfig', mounts.gitconfig, 'Mount ~/.gitconfig'),
      check('mount_git_credentials', mounts.git_credentials, 'Mount git credentials'),
      check('host_credentials', t.host_credentials, 'Give every user’s agents the operator’s credentials (the mounts above, the host’s GITHUB_TOKEN, GITLAB_TOKEN, GEMINI_API_KEY)')));
  let saved = null;
  return dialog({
    title: current ? `Edit ${current.name || current.id}` : 'New agent type',
    body, submitLabel: current ? 'Save' : 'Create', testid: 'agent-type-dialog', wide: true,
    onSubmit: async (v) => {
      const out = fromForm(v);
      const problem = validateAgentType(out);
      if (problem) return problem;
      saved = current ? await api.replaceAgentType(current.id, out) : await api.createAgentType(out);
      return null;
    },
  }).then((v) => (v ? saved : null));
}

export function agentTypesView(main, { setCrumbs, isAdmin }) {
  let alive = true;
  document.title = 'Agent types · Kandev';
  setCrumbs([{ href: '#/boards', text: 'Boards' }, { text: 'Agent types' }]);
  const rows = h('tbody');
  const note = h('p', { class: 'muted small' });
  const newBtn = h('button', { type: 'button', class: 'btn btn-primary', testid: 'agent-type-new', hidden: true, onclick: () => edit(null) }, '+ New agent type');
  const table = h('table', { class: 'table agent-types', testid: 'agent-types' },
    h('thead', null, h('tr', null, ['Id', 'Name', 'Image', 'Permissions', 'Needs', 'Status', ''].map((c) => h('th', { scope: 'col' }, c)))),
    rows);
  clear(main).append(
    h('div', { class: 'page-head' }, h('h1', { class: 'page-title' }, 'Agent types'), h('div', { class: 'page-actions' }, newBtn)),
    note, h('div', { class: 'table-wrap' }, table));

  async function changed(what) {
    invalidateAgentTypes();
    toast(what);
    await load();
  }

  async function edit(t) {
    const saved = await typeDialog(t);
    if (saved) await changed(t ? `Agent type “${saved.id}” saved.` : `Agent type “${saved.id}” created.`);
  }

  async function setEnabled(t, on) {
    try {
      if (on) await api.patchAgentType(t.id, { enabled: true });
      else await api.disableAgentType(t.id);
      await changed(`Agent type “${t.id}” ${on ? 'enabled' : 'disabled'}.`);
    } catch (e) { toast(`Could not ${on ? 'enable' : 'disable'} “${t.id}”: ${e.message}`, 'error'); }
  }

  async function load() {
    let types;
    try { types = await api.agentTypes({ includeDisabled: true }); } catch (e) {
      if (alive) clear(rows).append(h('tr', null, h('td', { colspan: 7, class: 'form-error' }, `Could not load the agent types: ${e.message}`)));
      return;
    }
    const admin = await isAdmin();
    if (!alive) return;
    newBtn.hidden = !admin;
    note.textContent = admin ? '' : 'Only admins can change agent types.';
    clear(rows).append(...types.map((t) => {
      const missing = Array.isArray(t.missing_env) ? t.missing_env : [];
      const on = t.enabled !== false;
      return h('tr', { testid: 'agent-type-row', dataset: { id: t.id, enabled: String(on) }, class: on ? '' : 'row-disabled' },
        h('td', null, h('code', null, t.id)),
        h('td', null, t.name, t.internal ? h('span', { class: 'chip muted', title: 'Hidden from the agent picker' }, ' internal') : null),
        h('td', null, h('code', { class: 'small' }, t.image)),
        h('td', null, t.permission_policy || '—'),
        h('td', { class: missing.length ? 'error-text' : '' },
          missing.length ? `missing ${missing.join(', ')}` : (t.required_env || []).join(', ') || '—'),
        h('td', null, h('span', { class: `badge ${on ? 'exec-done' : ''}`, testid: 'agent-type-status' }, on ? 'Enabled' : 'Disabled')),
        h('td', { class: 'row-actions' }, admin ? [
          h('button', { type: 'button', class: 'btn btn-small', testid: 'agent-type-edit', 'aria-label': `Edit ${t.id}`, onclick: () => edit(t) }, 'Edit'),
          h('button', { type: 'button', class: `btn btn-small${on ? ' btn-danger-ghost' : ''}`, testid: on ? 'agent-type-disable' : 'agent-type-enable',
            'aria-label': `${on ? 'Disable' : 'Enable'} ${t.id}`, onclick: () => setEnabled(t, !on) }, on ? 'Disable' : 'Enable')] : null));
    }));
    labelCells(table);
  }
  load();
  return () => { alive = false; };
}
