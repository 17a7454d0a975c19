// The task's Changes tab: where the work lives (branch, base, clone), the
// files changed against the base (committed and not), and each file's
// diff: unified, and side by side on wide screens. In REVIEW, the review
// loop: comments on lines or on the whole change go back to the agent
// ("Request changes"), or "Approve" commits, pushes and completes.

import { h, clear, toast } from './dom.js';
import { api } from './api.js';
import { STATE } from './common.js';
import { parseUnified, unifiedView, splitView } from './diff.js';

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

export function changesPanel(taskId, { onReviewed } = {}) {
  const where = h('dl', { class: 'kv changes-where', testid: 'changes-where' });
  const summary = h('p', { class: 'muted small', testid: 'changes-summary' });
  const list = h('ul', { class: 'changes-files', testid: 'changes-files' });
  const diffBox = h('div', { class: 'changes-diff', testid: 'changes-diff' });
  const refreshBtn = h('button', { type: 'button', class: 'btn btn-small', testid: 'changes-refresh', onclick: () => load() }, 'Refresh');
  // The review form: shown while the task is in REVIEW.
  const comments = [];
  const commentList = h('ul', { class: 'review-comments', testid: 'review-comments' });
  const target = h('span', { class: 'muted small', testid: 'review-target' }, 'The whole change');
  const commentInput = h('input', { type: 'text', class: 'review-comment-input', testid: 'review-comment-input', placeholder: 'A comment…', 'aria-label': 'Comment' });
  const addBtn = h('button', { type: 'button', class: 'btn btn-small', testid: 'review-add', onclick: addComment }, 'Add comment');
  const message = h('textarea', { rows: 2, class: 'review-message', testid: 'review-message', placeholder: 'A general comment, or the commit message when approving', 'aria-label': 'Review message' });
  const requestBtn = h('button', { type: 'button', class: 'btn', testid: 'review-request-changes', onclick: () => submit('request_changes') }, 'Request changes');
  const approveBtn = h('button', { type: 'button', class: 'btn btn-primary', testid: 'review-approve', onclick: () => submit('approve') }, 'Approve & push');
  const mergeBox = h('input', { type: 'checkbox', id: `review-merge-${taskId}`, testid: 'review-merge' });
  const mergeLabel = h('label', { for: `review-merge-${taskId}`, class: 'small' }, mergeBox, ' Approve merges into the base branch (no pull request)');
  const reviewBox = h('section', { class: 'review', testid: 'review', hidden: true, 'aria-label': 'Review' },
    h('h2', null, 'Review'),
    h('p', { class: 'muted small' }, 'Click a line of the diff to comment on it.'),
    h('div', { class: 'row review-add-row' }, target, commentInput, addBtn),
    commentList, message, h('div', { class: 'row' }, requestBtn, approveBtn, mergeLabel));
  let lineTarget = null;   // {path, line} or null for the whole change
  let busy = false;

  function setTarget(t) {
    lineTarget = t;
    target.textContent = t ? `${t.path}, line ${t.line}` : 'The whole change';
    if (t) commentInput.focus();
  }

  function addComment() {
    const body = commentInput.value.trim();
    if (!body) return;
    comments.push({ path: lineTarget ? lineTarget.path : '', line: lineTarget ? lineTarget.line : null, body });
    commentInput.value = '';
    setTarget(null);
    renderComments();
  }
  commentInput.addEventListener('keydown', (e) => { if (e.key === 'Enter') { e.preventDefault(); addComment(); } });

  function renderComments() {
    clear(commentList).append(...comments.map((c, i) => h('li', { testid: 'review-comment' },
      h('span', { class: 'muted small' }, c.path ? `${c.path}${c.line ? `:${c.line}` : ''}` : 'The whole change'), ' ', c.body, ' ',
      h('button', { type: 'button', class: 'btn btn-ghost btn-small', 'aria-label': 'Remove the comment', onclick: () => { comments.splice(i, 1); renderComments(); } }, '×'))));
  }

  async function submit(action) {
    if (busy) return;
    const body = { action, message: message.value.trim() };
    if (action === 'approve' && mergeBox.checked) body.merge = true;
    if (action === 'request_changes') {
      body.comments = comments.map((c) => ({ path: c.path, line: c.line, body: c.body }));
      if (!body.comments.length && !body.message) { toast('Add a comment or a message first.', 'error'); return; }
    }
    busy = true; requestBtn.disabled = approveBtn.disabled = true;
    try {
      const r = await api.review(taskId, body);
      comments.length = 0; renderComments(); message.value = '';
      if (action === 'approve' && r.delivery) {
        const d = r.delivery;
        toast(`Approved: ${d.branch} @ ${d.commit.slice(0, 12)}${d.pushed_to ? ` pushed to ${d.pushed_to}` : ''}${d.pull_request_url ? `; pull request ${d.pull_request_url}` : ''}`, 'info', 15000);
      } else toast('Changes requested: the agent is on it.', 'info');
      if (onReviewed) onReviewed(r);
    } catch (e) {
      toast(`Review failed: ${e.message}`, 'error', 10000);
    } finally {
      busy = false; requestBtn.disabled = approveBtn.disabled = false;
    }
  }

  const el = h('div', { class: 'changes' },
    h('div', { class: 'row' }, summary, refreshBtn), where,
    h('div', { class: 'changes-layout' }, list, diffBox), reviewBox);
  let selected = null;
  let generation = 0;

  // A click on a diff line picks it for the next comment.
  diffBox.addEventListener('click', (e) => {
    const line = e.target.closest('.diff-line[data-line], .diff-pair[data-line]');
    const file = e.target.closest('[data-testid=changes-file-diff]');
    if (!line || !file || reviewBox.hidden || !line.dataset.line) return;
    setTarget({ path: file.dataset.path, line: Number(line.dataset.line) });
  });

  let current = null;
  let hasClone = false;
  // In review: comments or approval; completed: delivery only; never
  // without a clone to deliver from.
  function showReview() {
    reviewBox.hidden = !current || !hasClone || ![STATE.REVIEW, STATE.COMPLETED].includes(current.state);
    requestBtn.hidden = !current || current.state !== STATE.REVIEW;
  }

  function setTask(task) {
    current = task;
    showReview();
    if (task) message.placeholder = `A general comment; or, approving, the commit message (default: “${task.title}” with the agent's summary)`;
  }

  async function load() {
    const mine = ++generation;
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
    hasClone = true; showReview();
    clear(where).append(
      h('dt', null, 'Branch'), h('dd', { testid: 'changes-branch' }, changes.branch || '(detached)'),
      h('dt', null, 'Base'), h('dd', { testid: 'changes-base' }, `${changes.base_branch || '(default)'} @ ${changes.base_commit.slice(0, 12)}`),
      h('dt', null, 'Clone'), h('dd', { testid: 'changes-path' }, h('code', null, changes.workspace_path)),
      h('dt', null, 'Disk'), h('dd', { testid: 'changes-disk' }, humanBytes(changes.disk_bytes)));
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
        h('span', { class: 'diff-stat' }, f.binary ? 'binary' : [h('span', { class: 'add' }, `+${f.additions}`), ' ', h('span', { class: 'del' }, `−${f.deletions}`)])))));
    const again = files.find((f) => f.path === selected) || files[0];
    if (again) show(again); else clear(diffBox);
  }

  function noClone(why) {
    hasClone = false;
    showReview();
    clear(list); clear(diffBox); clear(where);
    summary.textContent = why;
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
    clear(diffBox).append(h('div', { class: 'diff', testid: 'changes-file-diff', dataset: { path: d.path } },
      h('div', { class: 'diff-head' }, h('code', null, d.path),
        d.truncated ? h('span', { class: 'badge', testid: 'changes-truncated' }, 'truncated') : null,
        d.binary ? h('span', { class: 'badge' }, 'binary') : null),
      d.binary ? h('p', { class: 'muted small diff-note' }, 'A binary file: no line diff.') : null,
      d.binary ? null : unifiedView(rows),
      d.binary ? null : splitView(rows)));
  }

  return { el, load, setTask };
}
