// Board columns that fold: Completed and Cancelled get a toggle in their
// title; folded columns keep their count and drop target, and the choice is
// kept in localStorage. Works on the markup board.js makes
// (section[data-testid=column][data-state] > h2.column-title + ul.card-list).

import { h } from './dom.js';
import { STATE, STATE_LABELS } from './common.js';

export const COLLAPSIBLE = [STATE.COMPLETED, STATE.CANCELLED];
const KEY = 'kandev.collapsedColumns';

function load() {
  try {
    const v = JSON.parse(localStorage.getItem(KEY) || 'null');
    return new Set(Array.isArray(v) ? v : []);
  } catch { return new Set(); }
}

function save(set) {
  try { localStorage.setItem(KEY, JSON.stringify([...set])); } catch { /* private mode */ }
}

function setFolded(col, toggle, folded) {
  const st = col.dataset.state;
  col.classList.toggle('collapsed', folded);
  col.dataset.collapsed = String(folded);
  toggle.setAttribute('aria-expanded', String(!folded));
  toggle.title = `${folded ? 'Show' : 'Hide'} the ${STATE_LABELS[st] || st} cards`;
  toggle.textContent = folded ? '▸' : '▾';
}

/** Adds the fold toggles to the columns under `root` (idempotent). */
export function enhanceColumns(root) {
  const folded = load();
  for (const st of COLLAPSIBLE) {
    const col = root.querySelector(`[data-testid=column][data-state="${st}"]`);
    if (!col || col.querySelector('[data-testid=column-toggle]')) continue;
    const title = col.querySelector('.column-title');
    const list = col.querySelector('.card-list');
    if (!title || !list) continue;
    if (!list.id) list.id = `cards-${st}`;
    const toggle = h('button', { type: 'button', class: 'col-toggle', testid: 'column-toggle', 'aria-controls': list.id });
    toggle.addEventListener('click', () => {
      const now = load();
      const fold = !col.classList.contains('collapsed');
      if (fold) now.add(st); else now.delete(st);
      save(now);
      setFolded(col, toggle, fold);
    });
    title.prepend(toggle);
    setFolded(col, toggle, folded.has(st));
  }
}
