// Kandev browser UI: hash router, login, boards list; board and task views
// live in board.js and task.js, "Needs you" in needs.js.

import { h, clear, toast, dialog, field, confirmDialog, fmtTime } from './dom.js';
import { api, auth, setUnauthorizedHandler } from './api.js';
import { boardView } from './board.js';
import { taskView } from './task.js';
import { agentTypesView } from './admin.js';
import { secretsView } from './secrets.js';
import { enhanceColumns } from './columns.js';
import { installNotifier, viewing, forgetTasks } from './notify.js';
import { needsView, needsLink } from './needs.js';

const main = document.getElementById('main');
const crumbs = document.getElementById('crumbs');
const logoutBtn = document.getElementById('logout');
const userName = document.getElementById('user-name');
const adminLink = document.getElementById('admin-link');
const secretsLink = document.getElementById('secrets-link');
// "Needs you" in the top bar, with its count (needs.js).
const needsNav = h('a', { class: 'btn btn-ghost btn-small', href: '#/needs-you', testid: 'nav-needs', hidden: true }, 'Needs you');
secretsLink.before(needsNav);

// Who is logged in (GET /auth/me), asked once per token.
let meFor = null;
let mePromise = null;
function me() {
  const token = auth.token;
  if (!token) return Promise.resolve(null);
  if (meFor !== token) { meFor = token; mePromise = api.me().catch(() => { meFor = null; return null; }); }
  return mePromise;
}
const isAdmin = () => me().then((u) => !!(u && u.is_admin));

// Stable hooks for tests and debugging; views add to it.
const debug = { version: 1, get route() { return location.hash; } };
window.kandevDebug = debug;

let cleanup = null;

function setCrumbs(list) {
  clear(crumbs);
  list.forEach((c, i) => {
    if (i) crumbs.append(h('span', { class: 'sep', 'aria-hidden': 'true' }, '/'));
    crumbs.append(c.href ? h('a', { href: c.href, testid: c.testid, title: c.text }, c.text)
      : h('span', { 'aria-current': 'page', testid: c.testid, title: c.text }, c.text));
  });
}

function route() {
  if (cleanup) { try { cleanup(); } catch (e) { console.error(e); } cleanup = null; }
  for (const k of Object.keys(debug)) if (k !== 'version' && k !== 'route') delete debug[k];
  const hash = location.hash || '#/boards';
  const loggedIn = !!auth.token;
  logoutBtn.hidden = !loggedIn;
  userName.textContent = loggedIn ? auth.user : '';
  adminLink.hidden = true;
  secretsLink.hidden = !loggedIn;
  needsNav.hidden = !loggedIn;
  viewing(null);
  // The page's kind, for the layout (styles.css: the task page fills the window).
  const view = (name) => { document.body.dataset.view = name; };
  if (!loggedIn) { view('login'); setCrumbs([]); loginView(); return; }
  isAdmin().then((admin) => { adminLink.hidden = !admin || !auth.token; });
  let m;
  if ((m = /^#\/boards\/([^/]+)$/.exec(hash))) {
    view('board');
    cleanup = boardView(main, decodeURIComponent(m[1]), { setCrumbs, debug });
    enhanceColumns(main);
  } else if ((m = /^#\/tasks\/([^/]+)$/.exec(hash))) {
    view('task');
    viewing(decodeURIComponent(m[1]));
    cleanup = taskView(main, decodeURIComponent(m[1]), { setCrumbs, debug });
  } else if (/^#\/needs-you\/?$/.test(hash)) { view('needs'); cleanup = needsView(main, { setCrumbs }); }
  else if (/^#\/admin\/agent-types\/?$/.test(hash)) { view('admin'); cleanup = agentTypesView(main, { setCrumbs, isAdmin }); }
  else if (/^#\/settings\/secrets\/?$/.test(hash)) { view('secrets'); cleanup = secretsView(main, { setCrumbs }); }
  else { view('boards'); boardsView(); }
  main.focus({ preventScroll: true });
}

function loginView() {
  document.title = 'Log in · Kandev';
  const user = h('input', { name: 'username', autocomplete: 'username', required: true, testid: 'login-username' });
  const pass = h('input', { name: 'password', type: 'password', autocomplete: 'current-password', required: true, testid: 'login-password' });
  const err = h('p', { class: 'form-error', role: 'alert', testid: 'login-error', hidden: true });
  const submit = h('button', { type: 'submit', class: 'btn btn-primary', testid: 'login-submit' }, 'Log in');
  const form = h('form', { class: 'card-panel login', testid: 'login-form', 'aria-labelledby': 'login-h' },
    h('h1', { id: 'login-h' }, 'Log in to Kandev'), field('Username', user), field('Password', pass), err, submit);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    submit.disabled = true;
    err.hidden = true;
    try {
      const r = await api.login(user.value.trim(), pass.value);
      auth.set(r.token, user.value.trim());
      if (!location.hash || location.hash === '#/login') location.hash = '#/boards';
      else route();
    } catch (ex) {
      err.textContent = ex.status === 401 ? 'Wrong username or password.' : `Could not log in: ${ex.message}`;
      err.hidden = false;
      submit.disabled = false;
      pass.focus();
    }
  });
  clear(main).append(h('div', { class: 'center' }, form));
  user.focus();
}

function boardsView() {
  document.title = 'Boards · Kandev';
  setCrumbs([{ text: 'Boards' }]);
  let alive = true;
  const list = h('ul', { class: 'board-list', testid: 'board-list' });
  const name = h('input', { name: 'name', required: true, maxlength: 200, placeholder: 'New board name', testid: 'new-board-name' });
  const form = h('form', { class: 'inline-form', testid: 'new-board-form' },
    h('label', { for: 'nb-name', class: 'sr-only' }, 'Board name'), name,
    h('button', { type: 'submit', class: 'btn btn-primary', testid: 'new-board-submit' }, 'Create board'));
  name.id = 'nb-name';
  name.addEventListener('input', () => name.setCustomValidity(''));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const n = name.value.trim();
    if (!n) { name.setCustomValidity('Give the board a name: it cannot be blank.'); name.reportValidity(); return; }
    try {
      const b = await api.createBoard({ name: n });
      name.value = '';
      toast(`Board “${b.name || n}” created.`);
      load();
    } catch (ex) { toast(`Could not create the board: ${ex.message}`, 'error'); }
  });

  async function rename(b) {
    const input = h('input', { name: 'name', required: true, maxlength: 200, value: b.name, testid: 'rename-input' });
    const v = await dialog({
      title: 'Rename board', body: field('Name', input), submitLabel: 'Rename', testid: 'rename-dialog',
      onSubmit: async (vals) => {
        if (!vals.name.trim()) return { field: 'name', message: 'Give the board a name: it cannot be blank.' };
        await api.updateBoard(b.id, { name: vals.name.trim() });
        return null;
      },
    });
    if (v) load();
  }
  async function remove(b) {
    if (!(await confirmDialog('Delete board', `Delete “${b.name}” and all its tasks?`))) return;
    try { await api.deleteBoard(b.id); toast('Board deleted.'); load(); } catch (ex) { toast(`Could not delete: ${ex.message}`, 'error'); }
  }

  async function load() {
    try {
      const boards = await api.boards();
      if (!alive) return;
      clear(list);
      if (!boards.length) list.append(h('li', { class: 'empty muted' }, 'No boards yet. Create one above.'));
      for (const b of boards) {
        list.append(h('li', { class: 'board-item', testid: 'board-item', dataset: { boardId: b.id } },
          h('a', { href: `#/boards/${encodeURIComponent(b.id)}`, class: 'board-link', testid: 'board-link' }, b.name),
          b.description ? h('span', { class: 'muted small' }, b.description) : null,
          h('span', { class: 'muted small' }, fmtTime(b.created_at)),
          h('span', { class: 'board-actions' },
            h('button', { type: 'button', class: 'btn btn-small', testid: 'board-rename', 'aria-label': `Rename ${b.name}`, onclick: () => rename(b) }, 'Rename'),
            h('button', { type: 'button', class: 'btn btn-small btn-danger-ghost', testid: 'board-delete', 'aria-label': `Delete ${b.name}`, onclick: () => remove(b) }, 'Delete'))));
      }
    } catch (ex) { if (alive) { clear(list).append(h('li', { class: 'form-error' }, `Could not load boards: ${ex.message}`)); } }
  }

  clear(main).append(
    h('div', { class: 'page-head' }, h('h1', { class: 'page-title' }, 'Boards'), form),
    list);
  load();
  cleanup = () => { alive = false; };
}

setUnauthorizedHandler(() => {
  if (!auth.token) return;
  auth.clear();
  toast('Your session has expired; please log in again.', 'error');
  route();
});

logoutBtn.addEventListener('click', () => {
  auth.clear();
  forgetTasks();
  history.replaceState(null, '', '#/boards');
  route();
});

window.kandevNotifier = installNotifier(document.getElementById('notify-slot'));
needsLink(needsNav);
window.addEventListener('hashchange', route);
route();
