// The board's columns as drawn: the board's workflow (workflow.js), one
// section per column, left to right. Until the workflow is read (and when
// it cannot be) the board shows one column per state, which is also every
// board's default workflow. A card goes to its `column_id`, else to the
// first column of its state. A column shows its WIP limit ("2 / 3") and how
// many cards wait in its queue; the markup keeps `data-state` (the column's
// state) so columns.js folds Completed and Cancelled.

import { h } from './dom.js';
import { STATES, STATE_LABELS } from './common.js';

/** The columns of a board that has not been read yet: one per state. */
export function stateColumns() {
  return STATES.map((st) => ({ id: `state:${st}`, name: STATE_LABELS[st], state: st, colour: '', wip_limit: null, agent_type: null }));
}

/** A colour the board may show: `#rrggbb`, nothing else. */
function colour(c) {
  return /^#[0-9a-fA-F]{6}$/.test(c || '') ? c : null;
}

/**
 * The drawn columns under `wrap`. `onDrop(taskId, column)` is called when a
 * card is dropped on a column.
 */
export class BoardColumns {
  constructor(wrap, onDrop) {
    this.wrap = wrap;
    this.onDrop = onDrop;
    this.byId = new Map();
    this.list = [];
    this.draw(stateColumns());
  }

  /** Draws `columns` (the board's workflow), replacing what was drawn. */
  draw(columns) {
    this.list = columns.map((c) => this.section(c));
    this.byId = new Map(this.list.map((c) => [c.column.id, c]));
    this.wrap.replaceChildren(...this.list.map((c) => c.col));
  }

  section(column) {
    const st = column.state;
    const hid = `col-h-${String(column.id).replace(/[^A-Za-z0-9_-]/g, '')}`;
    // A column scrolls on its own; tabindex lets the keyboard scroll it.
    const list = h('ul', { class: 'card-list', 'aria-label': `${column.name} cards`, tabindex: '0', testid: 'card-list' });
    const count = h('span', { class: 'count', testid: 'column-count' }, '0');
    const queue = h('span', { class: 'column-queue', testid: 'column-queue', hidden: true });
    const auto = column.agent_type
      ? h('span', { class: 'column-auto', testid: 'column-auto', title: `Entering starts a run of ${column.agent_type}` }, `▶ ${column.agent_type}`)
      : null;
    const col = h('section', { class: `column col-${st}`, testid: 'column', dataset: { state: st, columnId: column.id }, 'aria-labelledby': hid },
      h('h2', { class: 'column-title', id: hid }, column.name, ' ', auto, queue, count), list);
    const tint = colour(column.colour);
    if (tint) col.style.borderTop = `3px solid ${tint}`;
    col.addEventListener('dragover', (e) => { if (e.dataTransfer.types.includes('text/x-kandev-task')) { e.preventDefault(); col.classList.add('drop'); } });
    col.addEventListener('dragleave', (e) => { if (!col.contains(e.relatedTarget)) col.classList.remove('drop'); });
    col.addEventListener('drop', (e) => {
      e.preventDefault();
      col.classList.remove('drop');
      const id = e.dataTransfer.getData('text/x-kandev-task');
      if (id) this.onDrop(id, column);
    });
    return { column, col, list, count, queue };
  }

  /** The first column of `state` (where a state change puts a card). */
  ofState(state) {
    return this.list.find((c) => c.column.state === state) || this.list[0];
  }

  /** Where `task` is drawn: its column, else the first of its state. */
  of(task, state) {
    return this.byId.get(task.column_id) || this.ofState(state);
  }

  /**
   * Whether dropping a card on `column` is a plain state change (today's
   * board): the first column of its state, with no automation or limit.
   */
  isPlain(column) {
    return !column.agent_type && column.wip_limit == null && this.ofState(column.state)?.column.id === column.id;
  }

  /** Shows how many cards a column holds against its limit, and its queue. */
  count(c, shown, total, queued) {
    const limit = c.column.wip_limit;
    c.count.textContent = limit != null ? `${shown - queued} / ${limit}` : String(shown);
    c.count.title = shown === total ? `${total} cards` : `${shown} of ${total} cards shown`;
    c.queue.hidden = queued === 0;
    c.queue.textContent = `${queued} queued`;
  }
}
