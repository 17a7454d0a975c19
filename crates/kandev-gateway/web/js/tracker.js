// A board's link to an issue tracker (issue 42): a GitHub repository or a
// GitLab project whose issues (with the label) become the board's tasks. One dialog shows the
// link (its repository, label, last sync and, when the last sync failed,
// why, in plain words) and sets or removes it. The webhook secret is never
// shown (the server never returns it); the token secret is only the name
// of one of the user's secrets. Everything the forge or the server wrote
// is shown as text.

import { h, dialog, field, fmtTime, toast } from './dom.js';
import { get, post, del, enc } from './api.js';

const path = (boardId) => `/boards/${enc(boardId)}/tracker`;

// The forges a link may be on, as the API names them.
const FORGES = { github: 'GitHub', gitlab: 'GitLab' };
const forgeName = (kind) => FORGES[kind] || kind;

// The board's link, or null when it has none (404).
async function loadLink(boardId) {
  try { return await get(path(boardId)); } catch (e) {
    if (e.status === 404) return null;
    throw e;
  }
}

function statusLines(link) {
  if (!link) return [h('p', { class: 'muted', testid: 'tracker-status' }, 'Not linked to an issue tracker.')];
  const label = link.label ? ` (issues labelled “${link.label}”)` : ' (every issue)';
  const synced = link.last_synced_at ? `last synced ${fmtTime(link.last_synced_at)}` : 'not synced yet';
  return [
    h('p', { testid: 'tracker-status', dataset: { repository: link.repository } },
      `Linked to ${link.repository} on ${forgeName(link.kind)}${label}; ${synced}.`),
    link.token_secret ? h('p', { class: 'muted small', testid: 'tracker-token' }, `Reads ${forgeName(link.kind)} with your secret ${link.token_secret}.`) : null,
    link.last_error ? h('p', { class: 'form-error', role: 'alert', testid: 'tracker-last-error' }, `The last sync failed: ${link.last_error}`) : null,
  ];
}

/** Shows the board's tracker link and lets the user set or remove it. */
export async function editTracker(boardId) {
  let link;
  try { link = await loadLink(boardId); } catch (e) { toast(`The tracker link cannot be read: ${e.message}`, 'error'); return; }
  const l = link || {};
  const input = (name, attrs = {}) => h('input', { name, value: l[name] || '', ...attrs });
  const kind = h('select', { name: 'kind', testid: 'tracker-kind' },
    Object.entries(FORGES).map(([value, name]) => h('option', { value }, name)));
  kind.value = l.kind || 'github';
  const saved = await dialog({
    title: 'Issue tracker', testid: 'tracker',
    actions: link ? [{ value: 'unlink', label: 'Unlink', testid: 'tracker-unlink', title: 'The tasks made of its issues stay' }] : [],
    body: h('div', null, ...statusLines(link),
      field('Forge', kind, 'GitLab: a project; its webhook sends the secret as X-Gitlab-Token'),
      field('Repository URL', input('repository_url', { required: true, placeholder: 'https://github.com/owner/repo.git' }),
        'on a forge of KANDEV_FORGES; its issues become this board\'s tasks'),
      field('Label', input('label', { maxlength: '100' }), 'only issues with this label; empty: every issue'),
      field('Agent type', input('agent_type', { maxlength: '100' }), 'of the tasks it makes; empty: the default'),
      field('Webhook secret', h('input', { name: 'webhook_secret', type: 'password', autocomplete: 'off' }),
        link && link.has_webhook_secret ? 'a secret is stored (never shown): saving replaces it' : 'none: the link is only synced periodically'),
      field('Token secret', input('token_secret', { maxlength: '128', placeholder: 'GITHUB_TOKEN' }),
        'the name of one of your secrets used as the forge\'s token; empty: the one of KANDEV_FORGES')),
    onSubmit: async (values) => {
      try {
        if (values._action === 'unlink') { await del(path(boardId)); return null; }
        await post(path(boardId), {
          kind: values.kind, repository_url: values.repository_url.trim(), label: values.label.trim(),
          agent_type: values.agent_type.trim(), webhook_secret: values.webhook_secret, token_secret: values.token_secret.trim(),
        });
        return null;
      } catch (e) { return e.message; }
    },
  });
  if (saved) toast(saved._action === 'unlink' ? 'Unlinked from the tracker' : 'Linked to the tracker', 'success');
}
