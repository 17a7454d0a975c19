// The task's Changes tab: where the work lives (branch, base, clone), the
// files changed against the base (committed and not), and each file's
// diff: unified, and side by side on wide screens. In REVIEW, the review
// loop: comments on lines or on the whole change go back to the agent
// ("Request changes"), or "Approve" commits, pushes and completes.

import { h, clear, toast } from './dom.js';
import { api } from './api.js';
import { STATE } from './common.js';
import { parseUnified, unifiedView, splitView, keyboardLines } from './diff.js';
import { LINE_TEXT_MAX, commentBox, decorateDiff, placeWords, threadEl } from './review.js';

// Kept importable from here (they moved to diff.js).
export { parseUnified, sideBySide } from './diff.js';

const STATUS_WORDS = {
  added: 'Added', modified: 'Modified', deleted: 'Deleted', renamed: 'Renamed',
  copied: 'Copied', type_changed: 'Type changed',
};

function humanBytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = Number(n) || 0, u = 0;
  while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
  return `${u ? v.toFixed(1) : v} ${units[u]}`;
}

// The diff view chosen with the switch (kept in localStorage), else side
// by side on a wide window. Below 900 px the side-by-side view falls back
// to the unified one (styles.css).
const VIEW_KEY = 'kandev.diffView';

function chosenView() {
  try {
    const v = localStorage.getItem(VIEW_KEY);
    return v === 'split' || v === 'unified' ? v : null;
  } catch { return null; }
}

// The Unified / Side by side switch; it marks `target` view-unified or
// view-split, and calls `onChange` when the view changes.
function viewSwitch(target, onChange) {
  const wide = matchMedia('(min-width: 1400px)');
  const pick = (view) => {
    try { localStorage.setItem(VIEW_KEY, view); } catch { /* kept for this page only */ }
    paint();
    onChange();
  };
  const unified = h('button', { type: 'button', class: 'btn btn-small', testid: 'diff-view-unified', onclick: () => pick('unified') }, 'Unified');
  const split = h('button', { type: 'button', class: 'btn btn-small', testid: 'diff-view-split', onclick: () => pick('split') }, 'Side by side');
  const el = h('div', { class: 'diff-view-switch', role: 'group', 'aria-label': 'Diff view', testid: 'diff-view' }, unified, split);
  function paint() {
    const view = chosenView() || (wide.matches ? 'split' : 'unified');
    target.classList.toggle('view-split', view === 'split');
    target.classList.toggle('view-unified', view === 'unified');
    unified.setAttribute('aria-pressed', String(view === 'unified'));
    split.setAttribute('aria-pressed', String(view === 'split'));
  }
  const onWide = () => { if (el.isConnected) paint(); else wide.removeEventListener('change', onWide); };
  wide.addEventListener('change', onWide);
  paint();
  return el;
}

// What a comment on the diff row `row` is about: its file, line, side and
// the line's text. A side-by-side row is about its new line, unless the
// click `e` was on its old half or it has none.
function targetOf(row, e) {
  const file = row.closest('[data-testid=changes-file-diff]');
  const old = !!row.dataset.oldLine && (!row.dataset.newLine || !!(e && e.target.closest('.side-old')));
  const side = old ? 'old' : 'new';
  const code = row.querySelector(row.classList.contains('diff-pair') ? `.code.side-${side}` : '.code');
  return { path: file.dataset.path, line: Number(old ? row.dataset.oldLine : row.dataset.newLine), side,
    line_text: (code ? code.textContent : '').slice(0, LINE_TEXT_MAX) };
}

export function changesPanel(taskId, { onReviewed } = {}) {
  const where = h('dl', { class: 'kv changes-where', testid: 'changes-where' });
  const summary = h('p', { class: 'muted small', testid: 'changes-summary' });
  const list = h('ul', { class: 'changes-files', testid: 'changes-files' });
  const diffBox = h('div', { class: 'changes-diff', testid: 'changes-diff' });
  const refreshBtn = h('button', { type: 'button', class: 'btn btn-small', testid: 'changes-refresh', onclick: () => load() }, 'Refresh');
  const switchEl = viewSwitch(diffBox, () => closeBox());
  // The comments kept from earlier requests for changes: those on the
  // whole change (or on a file no longer changed) above the file list.
  const generalBox = h('section', { class: 'review-general', testid: 'review-general', hidden: true, 'aria-label': 'Review comments on the whole change' });
  let kept = [];
  let filePaths = null;    // the changed files' paths, once listed
  let shown = null;        // the file whose diff shows: {path, rows, fileEl, aboveBox}
  let box = null;          // the open comment box: {el, focus, back, target}
  // The review form: shown while the task is in REVIEW.
  const comments = [];     // drafts: {path, line, side, line_text, body, draft}
  const commentList = h('ul', { class: 'review-comments', testid: 'review-comments' });
  const message = h('textarea', { rows: 2, class: 'review-message', testid: 'review-message', placeholder: 'A general comment, or the commit message when approving', 'aria-label': 'Review message' });
  const requestBtn = h('button', { type: 'button', class: 'btn', testid: 'review-request-changes', onclick: () => submit('request_changes') }, 'Request changes');
  const approveBtn = h('button', { type: 'button', class: 'btn btn-primary', testid: 'review-approve', onclick: () => submit('approve') }, 'Approve & push');
  const mergeBox = h('input', { type: 'checkbox', id: `review-merge-${taskId}`, testid: 'review-merge' });
  const mergeLabel = h('label', { for: `review-merge-${taskId}`, class: 'small' }, mergeBox, ' Approve merges into the base branch (no pull request)');
  const reviewBox = h('section', { class: 'review', testid: 'review', hidden: true, 'aria-label': 'Review' },
    h('h2', null, 'Review'),
    h('p', { class: 'muted small', testid: 'review-hint' }, 'Click a line of the diff to comment on it, or from the keyboard: Tab to the diff, ↑/↓ to the line, then Enter or C.'),
    commentList, message, h('div', { class: 'row' }, requestBtn, approveBtn, mergeLabel));
  let busy = false;
  const threadOpts = { onResolve: resolve, onRemove: removeDraft };

  function canComment() { return !reviewBox.hidden && !!current && current.state === STATE.REVIEW; }

  // Opens the comment box under `row` (a diff line, or the box above the
  // file for a comment on the whole file) for `target`; closed, the focus
  // goes back to `back`.
  function openBox(row, target, back = row) {
    closeBox(false);
    const opened = commentBox({
      label: placeWords(target),
      onAdd: (body) => { comments.push({ ...target, body, draft: true }); closeBox(); renderComments(); redecorate(); },
      onClose: () => closeBox(),
    });
    box = { ...opened, back, target };
    row.after(box.el);
    box.focus();
  }

  // Closes the comment box; the focus goes back to its line.
  function closeBox(refocus = true) {
    if (!box) return;
    const { el: boxEl, back } = box;
    box = null;
    boxEl.remove();
    if (refocus && back.isConnected) back.focus();
  }

  function removeDraft(c) {
    const i = comments.indexOf(c);
    if (i >= 0) comments.splice(i, 1);
    renderComments(); redecorate();
  }

  function renderComments() {
    clear(commentList).append(...comments.map((c) => h('li', { testid: 'review-comment' },
      h('span', { class: 'muted small' }, placeWords(c)), ' ', h('span', { class: 'review-body' }, c.body), ' ',
      h('button', { type: 'button', class: 'btn btn-ghost btn-small', 'aria-label': 'Remove the comment', onclick: () => removeDraft(c) }, '×'))));
  }

  // The shown file's comments, kept and drafts, in its diff.
  function redecorate() {
    if (!shown || !shown.fileEl.isConnected) return;
    const mine = (c) => c.path === shown.path;
    decorateDiff(shown.fileEl, shown.aboveBox, shown.rows, [...kept.filter(mine), ...comments.filter(mine)], threadOpts);
  }

  // Comments on the whole change, and those on files no longer changed.
  function renderGeneral() {
    const elsewhere = filePaths ? kept.filter((c) => c.path && !filePaths.has(c.path)) : [];
    const general = filePaths ? kept.filter((c) => !c.path) : kept;
    clear(generalBox).append(
      h('h2', null, 'Review comments'),
      ...general.map((c) => threadEl(c, { ...threadOpts, showPlace: !!c.path })),
      ...elsewhere.map((c) => threadEl(c, { ...threadOpts, outdated: true })));
    generalBox.hidden = !general.length && !elsewhere.length;
    for (const b of list.querySelectorAll('[data-testid=changes-file]')) {
      const open = kept.filter((c) => c.path === b.dataset.path && !c.resolved).length;
      const count = b.querySelector('[data-testid=changes-file-comments]');
      if (!count) continue;
      count.textContent = String(open);
      count.hidden = !open;
      count.title = `${open} open review comment${open === 1 ? '' : 's'}`;
    }
  }

  async function loadKept() {
    try {
      kept = (await api.reviewComments(taskId)).comments || [];
    } catch (e) {
      if (e.status !== 404) toast(`Cannot read the review comments: ${e.message}`, 'error');
      return;
    }
    renderGeneral(); redecorate();
  }

  async function resolve(c, resolved) {
    try {
      const fresh = await api.resolveComment(taskId, c.id, resolved);
      kept = kept.map((k) => (k.id === fresh.id ? fresh : k));
      renderGeneral(); redecorate();
      const again = [...el.querySelectorAll(`[data-comment-id="${fresh.id}"] [data-testid=review-resolve]`)]
        .find((b) => b.offsetParent !== null);
      if (again) again.focus();
    } catch (e) {
      toast(`Cannot ${resolved ? 'resolve' : 'reopen'} the comment: ${e.message}`, 'error');
    }
  }

  async function submit(action) {
    if (busy) return;
    const body = { action, message: message.value.trim() };
    if (action === 'approve' && mergeBox.checked) body.merge = true;
    if (action === 'request_changes') {
      body.comments = comments.map((c) => ({ path: c.path, line: c.line, side: c.side, line_text: c.line_text, body: c.body }));
      if (!body.comments.length && !body.message) { toast('Add a comment or a message first.', 'error'); return; }
    }
    busy = true; requestBtn.disabled = approveBtn.disabled = true;
    try {
      const r = await api.review(taskId, body);
      comments.length = 0; renderComments(); redecorate(); message.value = '';
      if (action === 'approve' && r.delivery) {
        const d = r.delivery;
        toast(`Approved: ${d.branch} @ ${d.commit.slice(0, 12)}${d.pushed_to ? ` pushed to ${d.pushed_to}` : ''}${d.pull_request_url ? `; pull request ${d.pull_request_url}` : ''}`, 'info', 15000);
      } else toast('Changes requested: the agent is on it.', 'info');
      loadKept();
      if (onReviewed) onReviewed(r);
    } catch (e) {
      toast(`Review failed: ${e.message}`, 'error', 10000);
    } finally {
      busy = false; requestBtn.disabled = approveBtn.disabled = false;
    }
  }

  const el = h('div', { class: 'changes' },
    h('div', { class: 'row changes-bar' }, summary, switchEl, refreshBtn), where, generalBox,
    h('div', { class: 'changes-layout' }, list, diffBox), reviewBox);
  let selected = null;
  let generation = 0;

  // A click on a diff line, or Enter or C on a focused one, opens the
  // comment box under it.
  diffBox.addEventListener('click', (e) => {
    const row = e.target.closest('.diff-line[data-line], .diff-pair[data-line]');
    if (!row || !canComment() || !row.closest('[data-testid=changes-file-diff]')) return;
    openBox(row, targetOf(row, e));
  });
  keyboardLines(diffBox, (row) => {
    if (canComment()) openBox(row, targetOf(row));
    else toast('Comments are for a task in review.', 'info');
  });

  let current = null;
  let hasClone = false;
  // In review: comments or approval; completed: delivery only; never
  // without a clone to deliver from.
  function showReview() {
    reviewBox.hidden = !current || !hasClone || ![STATE.REVIEW, STATE.COMPLETED].includes(current.state);
    requestBtn.hidden = !current || current.state !== STATE.REVIEW;
    for (const b of diffBox.querySelectorAll('[data-testid=review-file-comment]')) b.hidden = !canComment();
    if (!canComment()) closeBox(false);
  }

  function setTask(task) {
    current = task;
    showReview();
    if (task) message.placeholder = `A general comment; or, approving, the commit message (default: “${task.title}” with the agent's summary)`;
  }

  async function load() {
    const mine = ++generation;
    loadKept();
    // Only a task with a repository has a clone to compare.
    if (current && !current.repository_url) { noClone('No changes to show: this task has no repository.'); return; }
    summary.textContent = 'Loading…';
    let changes;
    try {
      changes = await api.changes(taskId);
    } catch (e) {
      if (mine !== generation) return;
      if (e.status === 404) noClone('No changes to show: this task has no cloned repository (yet).');
      else { clear(list); clear(diffBox); clear(where); summary.textContent = `Cannot read the changes: ${e.message}`; }
      return;
    }
    if (mine !== generation) return;
    // After an approval removed the clone, the approved change is shown
    // (read from Kandev's own repository): nothing to deliver again.
    hasClone = !changes.clone_removed; showReview();
    clear(where).append(
      h('dt', null, 'Branch'), h('dd', { testid: 'changes-branch' }, changes.branch || '(detached)'),
      h('dt', null, 'Base'), h('dd', { testid: 'changes-base' }, `${changes.base_branch || '(default)'} @ ${changes.base_commit.slice(0, 12)}`),
      h('dt', null, 'Clone'), h('dd', { testid: 'changes-path' }, changes.clone_removed ? 'Removed after the approval' : h('code', null, changes.workspace_path)),
      h('dt', null, 'Disk'), h('dd', { testid: 'changes-disk' }, humanBytes(changes.disk_bytes)));
    const d = changes.delivered;
    if (d) where.append(h('dt', null, 'Approved'), h('dd', { testid: 'changes-delivered' },
      `Approved and ${d.pushed_to ? 'pushed' : 'committed'} as `, h('code', { title: d.commit }, d.commit.slice(0, 12)),
      ` ${d.pushed_to ? 'to' : 'on'} `, h('code', null, d.branch), d.pushed_to ? ` (${d.pushed_to})` : ''));
    const files = changes.files;
    const adds = files.reduce((n, f) => n + f.additions, 0);
    const dels = files.reduce((n, f) => n + f.deletions, 0);
    summary.textContent = files.length
      ? `${files.length} file${files.length === 1 ? '' : 's'} changed, +${adds} −${dels}`
      : 'No changes against the base yet.';
    clear(list).append(...files.map((f) => h('li', null,
      h('button', { type: 'button', class: 'changes-file', testid: 'changes-file', dataset: { path: f.path, status: f.status },
        'aria-current': String(f.path === selected), onclick: () => show(f) },
        h('span', { class: `badge change-${f.status}`, title: STATUS_WORDS[f.status] || f.status }, (STATUS_WORDS[f.status] || f.status)[0]),
        h('span', { class: 'changes-path' }, f.old_path ? `${f.old_path} → ${f.path}` : f.path),
        h('span', { class: 'badge review-count', testid: 'changes-file-comments', hidden: true }),
        h('span', { class: 'diff-stat' }, f.binary ? 'binary' : [h('span', { class: 'add' }, `+${f.additions}`), ' ', h('span', { class: 'del' }, `−${f.deletions}`)])))));
    filePaths = new Set(files.map((f) => f.path));
    renderGeneral();
    const again = files.find((f) => f.path === selected) || files[0];
    if (again) show(again); else clear(diffBox);
  }

  function noClone(why) {
    hasClone = false;
    showReview();
    clear(list); clear(diffBox); clear(where);
    summary.textContent = why;
    filePaths = null; shown = null;
    renderGeneral();
  }

  async function show(file) {
    selected = file.path;
    for (const b of list.querySelectorAll('[data-testid=changes-file]')) b.setAttribute('aria-current', String(b.dataset.path === file.path));
    const mine = generation;
    clear(diffBox).append(h('p', { class: 'muted small' }, 'Loading the diff…'));
    let d;
    try {
      d = await api.fileDiff(taskId, file.path);
    } catch (e) {
      if (mine === generation) clear(diffBox).append(h('p', { class: 'error' }, `Cannot read the diff: ${e.message}`));
      return;
    }
    if (mine !== generation || selected !== file.path) return;
    const rows = parseUnified(d.diff);
    // Comments on the whole file, and those whose line is gone, above it.
    const aboveBox = h('div', { class: 'diff-file-threads', testid: 'changes-file-threads', hidden: true });
    const head = h('div', { class: 'diff-head' }, h('code', null, d.path),
      d.truncated ? h('span', { class: 'badge', testid: 'changes-truncated' }, 'truncated') : null,
      d.binary ? h('span', { class: 'badge' }, 'binary') : null,
      h('button', { type: 'button', class: 'btn btn-ghost btn-small diff-file-comment', testid: 'review-file-comment',
        hidden: !canComment(), onclick: (e) => openBox(aboveBox, { path: d.path, line: null, side: 'new', line_text: '' }, e.currentTarget) }, 'Comment on the file'));
    const fileEl = h('div', { class: 'diff', testid: 'changes-file-diff', dataset: { path: d.path } },
      head, aboveBox,
      d.binary ? h('p', { class: 'muted small diff-note' }, 'A binary file: no line diff.') : null,
      d.binary ? null : unifiedView(rows),
      d.binary ? null : splitView(rows));
    const typing = box && box.el.contains(document.activeElement);
    clear(diffBox).append(fileEl);
    shown = { path: d.path, rows, fileEl, aboveBox };
    redecorate();
    keepBox(typing);
  }

  // The diff was drawn again (a reload, the file shown again): an open
  // comment box moves, with what is typed in it, under its line in the new
  // diff; it closes when its file or line is no longer shown.
  function keepBox(typing) {
    if (!box) return;
    const { path, line, side } = box.target;
    const body = [...shown.fileEl.querySelectorAll('.diff-body')].find((b) => b.offsetParent !== null);
    const row = path !== shown.path ? null
      : !line ? shown.aboveBox
        : body && body.querySelector(`:scope > [data-${side}-line="${line}"]`);
    if (!row) { box = null; return; }
    if (line) box.back = row;
    else box.back = shown.fileEl.querySelector('[data-testid=review-file-comment]') || row;
    row.after(box.el);
    if (typing) box.focus();
  }

  return { el, load, setTask };
}
