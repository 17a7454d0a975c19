// Diffs in the UI. A simple line diff for tool-call diff content
// (oldText -> newText): common prefix/suffix are trimmed, then an LCS table
// is used when the middle is small enough; otherwise the middle is shown as
// removed + added. And the Changes tab's diff of one file: git's unified
// diff parsed into rows, shown unified or side by side.

import { h } from './dom.js';

const MAX_CELLS = 400_000;

export function lineDiff(oldText, newText) {
  const a = oldText == null || oldText === '' ? [] : String(oldText).replace(/\n$/, '').split('\n');
  const b = newText == null || newText === '' ? [] : String(newText).replace(/\n$/, '').split('\n');
  let pre = 0;
  while (pre < a.length && pre < b.length && a[pre] === b[pre]) pre++;
  let suf = 0;
  while (suf < a.length - pre && suf < b.length - pre && a[a.length - 1 - suf] === b[b.length - 1 - suf]) suf++;
  const out = [];
  for (let i = 0; i < pre; i++) out.push({ op: ' ', text: a[i], oldNo: i + 1, newNo: i + 1 });
  const am = a.slice(pre, a.length - suf);
  const bm = b.slice(pre, b.length - suf);
  const mid = [];
  if (am.length * bm.length <= MAX_CELLS && am.length && bm.length) {
    const n = am.length, m = bm.length;
    const dp = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        dp[i][j] = am[i] === bm[j] ? dp[i + 1][j + 1] + 1 : Math.max(dp[i + 1][j], dp[i][j + 1]);
      }
    }
    let i = 0, j = 0;
    while (i < n && j < m) {
      if (am[i] === bm[j]) { mid.push({ op: ' ', text: am[i] }); i++; j++; }
      else if (dp[i + 1][j] >= dp[i][j + 1]) { mid.push({ op: '-', text: am[i++] }); }
      else { mid.push({ op: '+', text: bm[j++] }); }
    }
    while (i < n) mid.push({ op: '-', text: am[i++] });
    while (j < m) mid.push({ op: '+', text: bm[j++] });
  } else {
    for (const t of am) mid.push({ op: '-', text: t });
    for (const t of bm) mid.push({ op: '+', text: t });
  }
  let oldNo = pre, newNo = pre;
  for (const l of mid) {
    if (l.op !== '+') oldNo++;
    if (l.op !== '-') newNo++;
    out.push({ ...l, oldNo: l.op === '+' ? null : oldNo, newNo: l.op === '-' ? null : newNo });
  }
  for (let k = suf; k > 0; k--) {
    oldNo++; newNo++;
    out.push({ op: ' ', text: a[a.length - k], oldNo, newNo });
  }
  return out;
}

// Collapse long unchanged runs to `context` lines around changes.
export function hunks(lines, context = 3) {
  const keep = new Array(lines.length).fill(false);
  lines.forEach((l, i) => {
    if (l.op !== ' ') for (let k = Math.max(0, i - context); k <= Math.min(lines.length - 1, i + context); k++) keep[k] = true;
  });
  const out = [];
  let skipped = 0;
  lines.forEach((l, i) => {
    if (keep[i]) {
      if (skipped) out.push({ op: '…', text: `${skipped} unchanged line${skipped === 1 ? '' : 's'}` });
      skipped = 0;
      out.push(l);
    } else skipped++;
  });
  if (skipped) out.push({ op: '…', text: `${skipped} unchanged line${skipped === 1 ? '' : 's'}` });
  return out;
}

// ---- the Changes tab's diff of one file (a unified diff from git) ----

// Parses a unified diff (one file) into rows:
// {op: ' '|'+'|'-'|'@'|'!', text, oldNo, newNo}. '@' is a hunk header,
// '!' a line of git's own (binary, truncation).
export function parseUnified(text) {
  const rows = [];
  let oldNo = 0, newNo = 0, inHunk = false;
  for (const line of String(text).split('\n')) {
    const hunk = /^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@(.*)$/.exec(line);
    if (hunk) {
      oldNo = Number(hunk[1]); newNo = Number(hunk[2]); inHunk = true;
      rows.push({ op: '@', text: line });
    } else if (line.startsWith('[kandev: ') || line.startsWith('Binary files ')) {
      rows.push({ op: '!', text: line });
    } else if (!inHunk || line.startsWith('\\')) {
      // The file header (diff --git, index, ---, +++), or "\ No newline".
      if (line.startsWith('\\')) rows.push({ op: '!', text: line });
    } else if (line.startsWith('+')) {
      rows.push({ op: '+', text: line.slice(1), oldNo: null, newNo: newNo++ });
    } else if (line.startsWith('-')) {
      rows.push({ op: '-', text: line.slice(1), oldNo: oldNo++, newNo: null });
    } else if (line.startsWith(' ')) {
      rows.push({ op: ' ', text: line.slice(1), oldNo: oldNo++, newNo: newNo++ });
    }
  }
  return rows;
}

// Pairs rows for a side-by-side view: removed lines face the added lines
// that follow them.
export function sideBySide(rows) {
  const pairs = [];
  let i = 0;
  while (i < rows.length) {
    const r = rows[i];
    if (r.op === '-' || r.op === '+') {
      const del = [], add = [];
      while (i < rows.length && rows[i].op === '-') del.push(rows[i++]);
      while (i < rows.length && rows[i].op === '+') add.push(rows[i++]);
      for (let k = 0; k < Math.max(del.length, add.length); k++) pairs.push({ left: del[k] || null, right: add[k] || null });
    } else {
      pairs.push(r.op === ' ' ? { left: r, right: r } : { note: r });
      i++;
    }
  }
  return pairs;
}

const cls = { '+': 'diff-add', '-': 'diff-del', ' ': '', '@': 'diff-hunk', '!': 'diff-note' };

// A row's commentable line numbers, as data attributes: a removed line is
// on the old side (data-old-line), an added or unchanged one on the new
// side (data-new-line). data-line is whichever the row shows first.
function lineData(r) {
  return r.op === '-'
    ? { op: r.op, line: String(r.oldNo), oldLine: String(r.oldNo) }
    : { op: r.op, line: String(r.newNo), newLine: String(r.newNo) };
}

// Commentable rows take the focus in order (see keyboardLines): one of
// them is in the tab order at a time.
const ROW = { tabindex: '-1', role: 'button' };

export function unifiedView(rows) {
  const body = h('div', { class: 'diff-body diff-unified', testid: 'changes-diff-unified' },
    ...rows.map((r) => (r.op === '@' || r.op === '!')
      ? h('span', { class: `diff-skip ${cls[r.op]}` }, r.text)
      : h('div', { ...ROW, class: `diff-line ${cls[r.op]}`, dataset: lineData(r), 'aria-label': lineLabel(r) },
        h('span', { class: 'ln' }, r.oldNo ?? ''), h('span', { class: 'ln' }, r.newNo ?? ''),
        h('span', { class: 'op' }, r.op === ' ' ? '' : r.op), h('span', { class: 'code' }, r.text))));
  return rove(body);
}

function lineLabel(r) {
  const where = r.op === '-' ? `removed line ${r.oldNo}` : `${r.op === '+' ? 'added ' : ''}line ${r.newNo}`;
  return `${where}: ${r.text.slice(0, 80)}`;
}

export function splitView(rows) {
  const side = (r, op) => r
    ? [h('span', { class: `ln ${cls[r.op]} side-${op === '-' ? 'old' : 'new'}` }, (op === '-' ? r.oldNo : r.newNo) ?? ''),
      h('span', { class: `code ${cls[r.op]} side-${op === '-' ? 'old' : 'new'}` }, r.text)]
    : [h('span', { class: 'ln diff-empty' }), h('span', { class: 'code diff-empty' })];
  const pairData = (p) => {
    const d = p.right ? lineData(p.right) : lineData(p.left);
    if (p.left && p.left.op === '-') d.oldLine = String(p.left.oldNo);
    return d;
  };
  const body = h('div', { class: 'diff-body diff-split', testid: 'changes-diff-split' },
    ...sideBySide(rows).map((p) => p.note
      ? h('span', { class: `diff-skip ${cls[p.note.op]}` }, p.note.text)
      : h('div', { ...ROW, class: 'diff-pair', dataset: pairData(p), 'aria-label': lineLabel(p.right || p.left) },
        ...side(p.left, '-'), ...side(p.right, '+'))));
  return rove(body);
}

// ---- keyboard: the lines of a diff, one focusable after the other ----

const LINE_ROWS = ':scope > [data-line]';

// The first commentable row of a view is the one in the tab order.
function rove(body) {
  const first = body.querySelector(LINE_ROWS);
  if (first) first.tabIndex = 0;
  return body;
}

// Keyboard use of the diff views inside `container`: Tab reaches a view's
// lines, ↑/↓ (or j/k) go to the previous or next line, Home/End to the
// first or last, and Enter or C calls `onComment(row)`. The focused line
// stays the view's tab stop.
export function keyboardLines(container, onComment) {
  container.addEventListener('focusin', (e) => {
    const row = e.target;
    if (!row.matches || !row.matches('[data-line]') || !row.parentElement) return;
    for (const r of row.parentElement.querySelectorAll(LINE_ROWS)) r.tabIndex = r === row ? 0 : -1;
  });
  container.addEventListener('keydown', (e) => {
    const row = e.target;
    if (!row.matches || !row.matches('[data-line]') || e.altKey || e.ctrlKey || e.metaKey) return;
    const rows = [...row.parentElement.querySelectorAll(LINE_ROWS)];
    const at = rows.indexOf(row);
    const to = { ArrowDown: at + 1, j: at + 1, ArrowUp: at - 1, k: at - 1, Home: 0, End: rows.length - 1 }[e.key];
    if (to !== undefined) {
      e.preventDefault();
      const next = rows[Math.max(0, Math.min(rows.length - 1, to))];
      next.focus();
    } else if (e.key === 'Enter' || e.key === 'c' || e.key === 'C') {
      e.preventDefault();
      onComment(row);
    }
  });
}
