// A simple line diff for tool-call diff content (oldText -> newText).
// Common prefix/suffix are trimmed, then an LCS table is used when the
// middle is small enough; otherwise the middle is shown as removed + added.

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
