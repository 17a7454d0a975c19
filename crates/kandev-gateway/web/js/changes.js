// The task's Changes tab: where the work lives (branch, base, clone), the
// files changed against the base (committed and not), and each file's
// diff: unified, and side by side on wide screens. In REVIEW, the review
// loop: comments on lines or on the whole change go back to the agent
// ("Request changes"), or "Approve" commits, pushes and completes: the
// review panel (reviewpanel.js).

import { h, clear, toast } from './dom.js';
import { api } from './api.js';
import { parseUnified, unifiedView, splitView, keyboardLines } from './diff.js';
import { LINE_TEXT_MAX } from './review.js';
import { ReviewPanel } from './reviewpanel.js';

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

/** A file of the list: its status, path, open comments and size of change. */
function fileButton(f, selected, onclick) {
  return h('li', null,
    h('button', { type: 'button', class: 'changes-file', testid: 'changes-file', dataset: { path: f.path, status: f.status },
      'aria-current': String(f.path === selected), onclick },
    h('span', { class: `badge change-${f.status}`, title: STATUS_WORDS[f.status] || f.status }, (STATUS_WORDS[f.status] || f.status)[0]),
    h('span', { class: 'changes-path' }, f.old_path ? `${f.old_path} → ${f.path}` : f.path),
    h('span', { class: 'badge review-count', testid: 'changes-file-comments', hidden: true }),
    h('span', { class: 'diff-stat' }, f.binary ? 'binary' : [h('span', { class: 'add' }, `+${f.additions}`), ' ', h('span', { class: 'del' }, `−${f.deletions}`)])));
}

/** Where the work lives: branch, base, clone, disk, and the approved change. */
function renderWhere(where, changes) {
  clear(where).append(
    h('dt', null, 'Branch'), h('dd', { testid: 'changes-branch' }, changes.branch || '(detached)'),
    h('dt', null, 'Base'), h('dd', { testid: 'changes-base' }, `${changes.base_branch || '(default)'} @ ${changes.base_commit.slice(0, 12)}`),
    h('dt', null, 'Clone'), h('dd', { testid: 'changes-path' }, changes.clone_removed ? 'Removed after the approval' : h('code', null, changes.workspace_path)),
    h('dt', null, 'Disk'), h('dd', { testid: 'changes-disk' }, humanBytes(changes.disk_bytes)));
  const d = changes.delivered;
  if (d) where.append(h('dt', null, 'Approved'), h('dd', { testid: 'changes-delivered' },
    `Approved and ${d.pushed_to ? 'pushed' : 'committed'} as `, h('code', { title: d.commit }, d.commit.slice(0, 12)),
    ` ${d.pushed_to ? 'to' : 'on'} `, h('code', null, d.branch), d.pushed_to ? ` (${d.pushed_to})` : ''));
}

export function changesPanel(taskId, { onReviewed } = {}) {
  const panel = new ChangesPanel(taskId, onReviewed);
  return { el: panel.el, load: () => panel.load(), setTask: (task) => panel.setTask(task) };
}

class ChangesPanel {
  constructor(taskId, onReviewed) {
    this.taskId = taskId;
    this.where = h('dl', { class: 'kv changes-where', testid: 'changes-where' });
    this.summary = h('p', { class: 'muted small', testid: 'changes-summary' });
    this.list = h('ul', { class: 'changes-files', testid: 'changes-files' });
    this.diffBox = h('div', { class: 'changes-diff', testid: 'changes-diff' });
    const refreshBtn = h('button', { type: 'button', class: 'btn btn-small', testid: 'changes-refresh', onclick: () => this.load() }, 'Refresh');
    const review = new ReviewPanel(taskId, { list: this.list, diffBox: this.diffBox, onReviewed });
    this.review = review;
    const switchEl = viewSwitch(this.diffBox, () => review.closeBox());
    this.el = h('div', { class: 'changes' },
      h('div', { class: 'row changes-bar' }, this.summary, switchEl, refreshBtn), this.where, review.generalBox,
      h('div', { class: 'changes-layout' }, this.list, this.diffBox), review.el);
    review.root = this.el;
    this.selected = null;
    this.generation = 0;
    // A click on a diff line, or Enter or C on a focused one, opens the
    // comment box under it.
    this.diffBox.addEventListener('click', (e) => {
      const row = e.target.closest('.diff-line[data-line], .diff-pair[data-line]');
      if (!row || !review.canComment() || !row.closest('[data-testid=changes-file-diff]')) return;
      review.openBox(row, targetOf(row, e));
    });
    keyboardLines(this.diffBox, (row) => {
      if (review.canComment()) review.openBox(row, targetOf(row));
      else toast('Comments are for a task in review.', 'info');
    });
  }

  setTask(task) {
    this.current = task;
    this.review.setTask(task);
  }

  async load() {
    const mine = ++this.generation;
    this.review.loadKept();
    // Only a task with a repository has a clone to compare.
    if (this.current && !this.current.repository_url) { this.noClone('No changes to show: this task has no repository.'); return; }
    this.summary.textContent = 'Loading…';
    let changes;
    try {
      changes = await api.changes(this.taskId);
    } catch (e) {
      if (mine !== this.generation) return;
      if (e.status === 404) this.noClone('No changes to show: this task has no cloned repository (yet).');
      else { clear(this.list); clear(this.diffBox); clear(this.where); this.summary.textContent = `Cannot read the changes: ${e.message}`; }
      return;
    }
    if (mine !== this.generation) return;
    // After an approval removed the clone, the approved change is shown
    // (read from Kandev's own repository): nothing to deliver again.
    this.review.setClone(!changes.clone_removed);
    renderWhere(this.where, changes);
    this.renderFiles(changes.files);
  }

  renderFiles(files) {
    const adds = files.reduce((n, f) => n + f.additions, 0);
    const dels = files.reduce((n, f) => n + f.deletions, 0);
    this.summary.textContent = files.length
      ? `${files.length} file${files.length === 1 ? '' : 's'} changed, +${adds} −${dels}`
      : 'No changes against the base yet.';
    clear(this.list).append(...files.map((f) => fileButton(f, this.selected, () => this.show(f))));
    this.review.setFiles(new Set(files.map((f) => f.path)));
    const again = files.find((f) => f.path === this.selected) || files[0];
    if (again) this.show(again); else clear(this.diffBox);
  }

  noClone(why) {
    this.review.setClone(false);
    clear(this.list); clear(this.diffBox); clear(this.where);
    this.summary.textContent = why;
    this.review.setFiles(null);
  }

  async show(file) {
    this.selected = file.path;
    for (const b of this.list.querySelectorAll('[data-testid=changes-file]')) b.setAttribute('aria-current', String(b.dataset.path === file.path));
    const mine = this.generation;
    clear(this.diffBox).append(h('p', { class: 'muted small' }, 'Loading the diff…'));
    let d;
    try {
      d = await api.fileDiff(this.taskId, file.path);
    } catch (e) {
      if (mine === this.generation) clear(this.diffBox).append(h('p', { class: 'error' }, `Cannot read the diff: ${e.message}`));
      return;
    }
    if (mine !== this.generation || this.selected !== file.path) return;
    const shown = this.fileView(d);
    const typing = this.review.typing();
    clear(this.diffBox).append(shown.fileEl);
    this.review.showFile(shown, typing);
  }

  /** A file's diff, both views, with its head: {path, rows, fileEl, aboveBox}. */
  fileView(d) {
    const review = this.review;
    const rows = parseUnified(d.diff);
    // Comments on the whole file, and those whose line is gone, above it.
    const aboveBox = h('div', { class: 'diff-file-threads', testid: 'changes-file-threads', hidden: true });
    const head = h('div', { class: 'diff-head' }, h('code', null, d.path),
      d.truncated ? h('span', { class: 'badge', testid: 'changes-truncated' }, 'truncated') : null,
      d.binary ? h('span', { class: 'badge' }, 'binary') : null,
      h('button', { type: 'button', class: 'btn btn-ghost btn-small diff-file-comment', testid: 'review-file-comment',
        hidden: !review.canComment(), onclick: (e) => review.openBox(aboveBox, { path: d.path, line: null, side: 'new', line_text: '' }, e.currentTarget) }, 'Comment on the file'));
    const fileEl = h('div', { class: 'diff', testid: 'changes-file-diff', dataset: { path: d.path } },
      head, aboveBox,
      d.binary ? h('p', { class: 'muted small diff-note' }, 'A binary file: no line diff.') : null,
      d.binary ? null : unifiedView(rows),
      d.binary ? null : splitView(rows));
    return { path: d.path, rows, fileEl, aboveBox };
  }
}
