// Review comments in the Changes tab. The comments kept from each "Request
// changes" (GET /tasks/{id}/review/comments) are shown where they belong in
// a file's diff: under their line, or above the file when they are on the
// whole file or their line is gone ("outdated"); comments on the whole
// change go above the file list. Each can be resolved and opened again.
// Comments not sent yet (drafts) show under their line too. A new comment
// is written in a box under its line: a textarea, Enter a new line,
// Ctrl/⌘+Enter adds it, Escape cancels.

import { h, clear } from './dom.js';

// How much of a commented line is kept to recognise it in a later diff.
export const LINE_TEXT_MAX = 500;

const sideOf = (c) => c.side || 'new';

// The row's line number on `side`, if it has one there.
function lineOn(r, side) {
  if (r.op !== ' ' && r.op !== '+' && r.op !== '-') return null;
  if (side === 'old') return r.op === '-' ? r.oldNo : null;
  return r.op === '-' ? null : r.newNo;
}

// The line of `rows` (a file's parsed diff) a comment belongs to: its own
// line, while that still reads as it did; else the one line on its side
// that reads so (the line moved); else none (outdated).
export function anchorOf(rows, c) {
  const side = sideOf(c);
  const text = c.line_text || '';
  const reads = (r) => r.text.slice(0, LINE_TEXT_MAX) === text;
  const at = rows.find((r) => lineOn(r, side) === c.line);
  if (at && (!text || reads(at))) return c.line;
  if (!text) return null;
  const moved = rows.filter((r) => lineOn(r, side) != null && reads(r));
  return moved.length === 1 ? lineOn(moved[0], side) : null;
}

// Sorts one file's comments: `inline` (each with its `anchor` line),
// `file` (on the whole file) and `outdated` (their line is gone).
export function placeComments(rows, comments) {
  const out = { inline: [], file: [], outdated: [] };
  for (const c of comments) {
    if (!c.line) { out.file.push(c); continue; }
    const anchor = anchorOf(rows, c);
    if (anchor == null) out.outdated.push(c);
    else out.inline.push({ comment: c, anchor });
  }
  return out;
}

// Where a comment is, in words.
export function placeWords(c) {
  if (!c.path) return 'The whole change';
  if (!c.line) return c.path;
  return `${c.path}, ${sideOf(c) === 'old' ? 'removed line' : 'line'} ${c.line}`;
}

function when(iso) {
  const t = iso ? new Date(iso) : null;
  return t && !Number.isNaN(t.getTime()) ? t.toLocaleString() : '';
}

// One comment: a kept one ({id, author, round, …}), or a draft
// ({draft: true}). `onResolve(comment, resolved)` resolves or reopens a
// kept one; `onRemove(comment)` drops a draft.
export function threadEl(c, { onResolve, onRemove, outdated = false, showPlace = false } = {}) {
  const draft = !!c.draft;
  const head = h('div', { class: 'review-thread-head' },
    draft ? h('span', { class: 'badge', testid: 'review-thread-pending' }, 'Pending')
      : [h('strong', { class: 'review-author' }, c.author || 'someone'),
        h('span', { class: 'muted small' }, `round ${c.round} · ${when(c.created_at)}`)],
    outdated ? h('span', { class: 'badge review-outdated', testid: 'review-thread-outdated', title: c.line_text ? `The line read: ${c.line_text}` : undefined }, 'Outdated') : null,
    c.resolved ? h('span', { class: 'badge review-resolved', testid: 'review-thread-resolved' }, `Resolved by ${c.resolved_by || 'someone'}`) : null);
  const place = showPlace || outdated ? h('p', { class: 'muted small review-place' }, placeWords(c)) : null;
  const action = draft
    ? h('button', { type: 'button', class: 'btn btn-ghost btn-small', testid: 'review-draft-remove', onclick: () => onRemove && onRemove(c) }, 'Remove')
    : h('button', { type: 'button', class: 'btn btn-small', testid: 'review-resolve', 'aria-pressed': String(!!c.resolved),
      onclick: () => onResolve && onResolve(c, !c.resolved) }, c.resolved ? 'Unresolve' : 'Resolve');
  return h('div', { class: `review-thread${draft ? ' pending' : ''}${c.resolved ? ' resolved' : ''}`, testid: 'review-thread',
    dataset: { commentId: c.id || '', resolved: String(!!c.resolved), outdated: String(outdated), path: c.path || '', line: c.line ? String(c.line) : '' } },
  head, place, h('div', { class: 'review-body', testid: 'review-thread-body' }, c.body), h('div', { class: 'review-thread-actions' }, action));
}

// The box a new comment is written in, for the place `label` names.
// `onAdd(body)` takes the text; `onClose()` closes the box (Escape too).
export function commentBox({ label, onAdd, onClose }) {
  const input = h('textarea', { rows: 3, class: 'review-comment-input', testid: 'review-comment-input', 'aria-label': `Comment on ${label}`,
    placeholder: 'Leave a comment…', 'aria-describedby': 'review-comment-hint' });
  const hint = h('p', { class: 'muted small', id: 'review-comment-hint', testid: 'review-comment-hint' },
    'Enter starts a new line; Ctrl+Enter (⌘+Enter on a Mac) adds the comment; Esc cancels.');
  const submit = () => {
    const body = input.value.trim();
    if (body) onAdd(body); else input.focus();
  };
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') { e.preventDefault(); e.stopPropagation(); onClose(); }
    else if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); submit(); }
  });
  const el = h('div', { class: 'diff-comment-box', testid: 'review-comment-box', role: 'group', 'aria-label': `New comment on ${label}` },
    h('p', { class: 'muted small', testid: 'review-target' }, label), input, hint,
    h('div', { class: 'row' },
      h('button', { type: 'button', class: 'btn btn-small btn-primary', testid: 'review-add', onclick: submit }, 'Add comment'),
      h('button', { type: 'button', class: 'btn btn-small', testid: 'review-cancel', onclick: onClose }, 'Cancel')));
  return { el, focus: () => input.focus() };
}

// The row of a diff view that shows line `n` on `side`.
function rowOf(body, side, n) {
  return body.querySelector(`:scope > [data-${side}-line="${n}"]`);
}

// Shows the file's comments in its diff element `fileEl` (rendered from
// `rows`): inline under their rows in each view, and in `aboveBox` those on
// the whole file or whose line is gone. `comments` are the file's kept
// comments and drafts; `opts` go to threadEl.
export function decorateDiff(fileEl, aboveBox, rows, comments, opts) {
  for (const old of fileEl.querySelectorAll('.diff-body > .review-thread')) old.remove();
  const placed = placeComments(rows, comments);
  for (const body of fileEl.querySelectorAll('.diff-body')) {
    const last = new Map(); // row -> the last thread under it
    for (const { comment, anchor } of placed.inline) {
      const row = rowOf(body, sideOf(comment), anchor);
      if (!row) continue;
      const thread = threadEl(comment, opts);
      (last.get(row) || row).after(thread);
      last.set(row, thread);
    }
  }
  clear(aboveBox).append(
    ...placed.file.map((c) => threadEl(c, opts)),
    ...placed.outdated.map((c) => threadEl(c, { ...opts, outdated: true })));
  aboveBox.hidden = !aboveBox.children.length;
  return placed;
}
