// Pieces the feed's items are drawn with, and the task page too: a plan's
// entries, a tool call's diff, the write a permission prompt asks for.

import { h } from './dom.js';
import { lineDiff, hunks } from './diff.js';

// A permission prompt shows this much of the write it asks for.
const WRITE_PREVIEW_LINES = 12;
const WRITE_LINE_CHARS = 400;

export function renderPlan(entries) {
  return h('ul', { class: 'plan', testid: 'plan-list' }, entries.map((e) => {
    const st = e.status || 'pending';
    const box = h('input', { type: 'checkbox', disabled: true, 'aria-label': st });
    box.checked = st === 'completed';
    box.indeterminate = st === 'in_progress';
    return h('li', { class: `plan-entry plan-${st}`, testid: 'plan-entry', dataset: { status: st } },
      box, h('span', { class: 'plan-text' }, e.content), h('span', { class: `prio prio-${e.priority}` }, e.priority));
  }));
}

/** A diff line's class: add, del, skip or ctx. */
function lineClass(l) {
  return l.op === '+' ? 'add' : l.op === '-' ? 'del' : l.op === '…' ? 'skip' : 'ctx';
}

/** A tool call's ACP `diff` content: its path, +/− counts and first 800 lines. */
export function renderDiff(c) {
  const lines = hunks(lineDiff(c.oldText, c.newText));
  const added = lines.filter((l) => l.op === '+').length;
  const removed = lines.filter((l) => l.op === '-').length;
  const body = h('div', { class: 'diff-body', role: 'table', 'aria-label': `Diff of ${c.path || 'file'}` });
  const shown = lines.slice(0, 800);
  for (const l of shown) {
    body.append(h('div', { class: `diff-line diff-${lineClass(l)}`, role: 'row' },
      h('span', { class: 'ln', role: 'cell' }, l.oldNo ?? ''),
      h('span', { class: 'ln', role: 'cell' }, l.newNo ?? ''),
      h('span', { class: 'op', role: 'cell', 'aria-hidden': 'true' }, l.op === '…' ? '' : l.op),
      h('span', { class: 'code', role: 'cell' }, l.text)));
  }
  if (lines.length > shown.length) body.append(h('div', { class: 'diff-line diff-skip' }, `… ${lines.length - shown.length} more lines`));
  return h('div', { class: 'diff', testid: 'diff' },
    h('div', { class: 'diff-head' }, h('code', null, c.path || ''), c.oldText == null ? h('span', { class: 'badge' }, 'new file') : null,
      h('span', { class: 'diff-stat' }, h('span', { class: 'add' }, `+${added}`), ' ', h('span', { class: 'del' }, `−${removed}`))),
    body);
}

/** The lines a write preview shows: a diff when the old text is known, else the new text. */
function writeLines(w) {
  if (w.oldText !== undefined) return hunks(lineDiff(w.oldText, w.newText));
  const text = String(w.newText).replace(/\n$/, '');
  return (text ? text.split('\n') : []).map((t, i) => ({ op: '+', text: t, oldNo: null, newNo: i + 1 }));
}

/** The write a permission prompt asks for: its path and its first lines, as text. */
export function renderWrite(w) {
  w.lines = w.lines || writeLines(w);
  const shown = w.lines.slice(0, WRITE_PREVIEW_LINES);
  const body = h('div', { class: 'diff-body', role: 'table', 'aria-label': `What would be written to ${w.path}` });
  for (const l of shown) {
    const cls = lineClass(l);
    const text = l.text.length > WRITE_LINE_CHARS ? `${l.text.slice(0, WRITE_LINE_CHARS)}…` : l.text;
    body.append(cls === 'skip' ? h('div', { class: 'diff-line diff-skip' }, text)
      : h('div', { class: `diff-line diff-${cls}`, role: 'row', testid: 'permission-write-line', dataset: { op: l.op } },
        h('span', { class: 'ln', role: 'cell' }, l.oldNo ?? ''), h('span', { class: 'ln', role: 'cell' }, l.newNo ?? ''),
        h('span', { class: 'op', role: 'cell', 'aria-hidden': 'true' }, l.op), h('span', { class: 'code', role: 'cell' }, text)));
  }
  const more = w.lines.length - shown.length;
  if (more > 0) body.append(h('div', { class: 'diff-line diff-skip', testid: 'permission-write-more' }, `… ${more} more line${more === 1 ? '' : 's'}`));
  return h('div', { class: 'diff perm-write', testid: 'permission-write' },
    h('div', { class: 'diff-head' }, 'Writes', h('code', { testid: 'permission-write-path' }, w.path),
      w.oldText === null ? h('span', { class: 'badge' }, 'new file') : null),
    body);
}

/** A value as indented JSON, at most 4,000 characters. */
export function safeJson(v) {
  try {
    const s = JSON.stringify(v, null, 2);
    return s.length > 4000 ? `${s.slice(0, 4000)}…` : s;
  } catch { return String(v); }
}
