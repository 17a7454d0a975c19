// The board view: one column per state, cards pushed by the server over
// the board's live stream (boardsocket.js: a snapshot, then each change;
// no polling), drag and drop plus a keyboard-friendly state select, search
// and filters (boardfilter.js). Columns scroll on their own and are
// reachable from the keyboard. A card: boardcard.js.

import { h, clear, toast, confirmDialog } from './dom.js';
import { api, taskState } from './api.js';
import { STATE_LABELS, taskDialog } from './common.js';
import { BoardSocket } from './boardsocket.js';
import { boardFilter } from './boardfilter.js';
import { followBoard, seeCards } from './notify.js';
import { editWorkflow, loadColumns, moveToColumn } from './workflow.js';
import { BoardColumns } from './boardcolumns.js';
import { editBlockers } from './blockers.js';
import { enhanceColumns } from './columns.js';
import { editTracker } from './tracker.js';
import { cardKey, renderCard } from './boardcard.js';

// Kept importable from here (it moved to boardcard.js).
export { repoName } from './boardcard.js';

export function boardView(main, boardId, { setCrumbs, debug }) {
  const page = new BoardPage(main, boardId, setCrumbs, debug);
  return () => page.cleanup();
}

class BoardPage {
  constructor(main, boardId, setCrumbs, debug) {
    this.alive = true;
    this.boardId = boardId;
    this.setCrumbs = setCrumbs;
    this.debug = debug;
    this.cards = new Map();    // id -> {el, task, key}
    this.statuses = new Map(); // id -> execution status
    this.pending = new Set();  // ids with a state change in flight
    this.build(main);
    this.loadBoard();
    this.live = new BoardSocket(boardId, { onMessage: (msg) => this.onPush(msg), onStatus: (s) => this.onStatus(s) });
    this.unfollow = followBoard(boardId);
    debug.boardSocket = this.live;
    this.live.open();
    this.sortColumns();
    this.readColumns();
  }

  build(main) {
    const { boardId } = this;
    this.filter = boardFilter(boardId, () => this.sortColumns());
    this.title = h('h1', { class: 'page-title', testid: 'board-title' }, 'Board');
    const newBtn = h('button', { type: 'button', class: 'btn btn-primary', testid: 'new-task', onclick: () => this.createTask() }, '+ New task');
    const flowBtn = h('button', { type: 'button', class: 'btn', testid: 'edit-workflow',
      onclick: async () => { if (await editWorkflow(boardId)) this.readColumns(); } }, 'Workflow');
    const trackerBtn = h('button', { type: 'button', class: 'btn', testid: 'edit-tracker',
      title: 'The GitHub repository whose issues become this board\'s tasks', onclick: () => editTracker(boardId) }, 'Tracker');
    this.colWrap = h('div', { class: 'columns', testid: 'columns' });
    this.columns = new BoardColumns(this.colWrap, (id, column) => this.dropTask(id, column));
    this.updated = h('span', { class: 'muted small', testid: 'board-updated', 'aria-live': 'off' });
    clear(main).append(
      h('div', { class: 'page-head' }, this.title, h('div', { class: 'page-actions' }, this.updated, trackerBtn, flowBtn, newBtn)),
      this.filter.el,
      this.colWrap);
  }

  /** The board's name, in the title and the crumbs; a board gone goes back to the list. */
  loadBoard() {
    api.board(this.boardId).then((b) => {
      if (!this.alive) return;
      this.title.textContent = b.name || 'Board';
      document.title = `${b.name} · Kandev`;
      this.setCrumbs([{ href: '#/boards', text: 'Boards' }, { text: b.name }]);
    }).catch((e) => {
      if (this.alive && e.status === 404) { toast('This board no longer exists.', 'error'); location.hash = '#/boards'; }
    });
    this.setCrumbs([{ href: '#/boards', text: 'Boards' }]);
  }

  renderCard(t) {
    const parent = t.parent_id ? this.cards.get(t.parent_id)?.task.title : null;
    return renderCard(t, this.statuses.get(t.id), parent, {
      move: (state) => this.moveTask(t.id, state),
      column: () => moveToColumn(this.boardId, t),
      edit: () => this.editTask(t.id),
      blockers: () => editBlockers(t, [...this.cards.values()].map((c) => c.task)),
      remove: () => this.deleteTask(t.id),
    });
  }

  // Into the task's column (a state change in flight: the first column of
  // the new state).
  place(el, task, state) {
    const { list } = state ? this.columns.ofState(state) : this.columns.of(task, taskState(task));
    if (el.parentNode !== list) list.append(el);
  }

  // The board's workflow, drawn; the cards go to their columns again.
  async readColumns() {
    let cols;
    try { cols = await loadColumns(this.boardId); } catch (e) {
      if (this.alive) toast(`The board's columns could not be read: ${e.message}`, 'error');
      return;
    }
    if (!this.alive || !Array.isArray(cols) || cols.length === 0) return;
    this.columns.draw(cols);
    for (const [, c] of this.cards) this.place(c.el, c.task);
    enhanceColumns(this.colWrap);
    this.sortColumns();
  }

  // A card dropped on a column: a plain column of a state takes the state
  // (as the state select does); any other enters the column, its limit and
  // automation applying.
  async dropTask(id, column) {
    const c = this.cards.get(id);
    if (!c) return;
    if (this.columns.isPlain(column)) { this.moveTask(id, column.state); return; }
    if (c.task.column_id === column.id) return;
    try {
      const moved = await api.moveTask(id, column.id, c.task.version);
      if (moved && moved.queued) toast(`“${column.name}” is full: the card waits in its queue`);
    } catch (e) {
      toast(`Cannot move “${c.task.title}” to ${column.name}: ${e.message}`, 'error');
    }
  }

  // Sorted by position, filtered, counted (the count is what shows).
  sortColumns() {
    const { cards, filter } = this;
    const taskOf = (el) => cards.get(el.dataset.taskId)?.task;
    let visible = 0;
    for (const c of this.columns.list) {
      const els = [...c.list.children];
      els.sort((a, b) => {
        const ta = taskOf(a), tb = taskOf(b);
        // Queued cards after those in the column, in the order they wait.
        return (ta?.queued ? 1 : 0) - (tb?.queued ? 1 : 0)
          || (Number(ta?.position) || 0) - (Number(tb?.position) || 0) || String(ta?.created_at).localeCompare(String(tb?.created_at));
      });
      els.forEach((e, i) => { if (c.list.children[i] !== e) c.list.insertBefore(e, c.list.children[i] || null); });
      let shown = 0;
      let queued = 0;
      for (const e of els) {
        const t = taskOf(e);
        e.hidden = !!t && !filter.matches(t);
        if (!e.hidden) shown++;
        if (!e.hidden && t?.queued) queued++;
      }
      visible += shown;
      this.columns.count(c, shown, els.length, queued);
    }
    filter.report(visible, cards.size);
  }

  // One card as the server has it now (unless a move of it is in flight).
  upsert(t) {
    if (this.pending.has(t.id)) return;
    const key = cardKey(t, this.statuses.get(t.id));
    const cur = this.cards.get(t.id);
    if (cur && cur.key === key) return;
    const focused = cur && cur.el.contains(document.activeElement) ? document.activeElement.dataset.testid : null;
    const el = this.renderCard(t);
    if (cur) cur.el.replaceWith(el);
    this.cards.set(t.id, { el, task: t, key });
    this.place(el, t);
    if (focused) el.querySelector(`[data-testid="${focused}"]`)?.focus();
  }

  removeCard(id) {
    const c = this.cards.get(id);
    if (c) { c.el.remove(); this.cards.delete(id); }
    this.statuses.delete(id);
  }

  afterChange() {
    this.filter.options([...this.cards.values()].map((c) => c.task));
    this.sortColumns();
  }

  // The board's live stream: a snapshot replaces every card, then each
  // card comes as it changes.
  onPush(msg) {
    if (!this.alive) return;
    const { boardId, cards, statuses, pending } = this;
    if (msg.type === 'snapshot') {
      const fresh = Array.isArray(msg.cards) ? msg.cards : [];
      statuses.clear();
      for (const c of fresh) statuses.set(c.task.id, c.execution);
      const seen = new Set(fresh.map((c) => c.task.id));
      for (const c of fresh) this.upsert(c.task);
      for (const id of [...cards.keys()]) if (!seen.has(id) && !pending.has(id)) this.removeCard(id);
      seeCards(boardId, fresh);
    } else if (msg.type === 'card' && msg.card && msg.card.task) {
      statuses.set(msg.card.task.id, msg.card.execution);
      this.upsert(msg.card.task);
      seeCards(boardId, [msg.card]);
    } else if (msg.type === 'removed' && msg.task_id) {
      if (!pending.has(msg.task_id)) this.removeCard(msg.task_id);
    } else return;
    this.debug.boardPushes = (this.debug.boardPushes || 0) + 1;
    this.debug.boardLastSeq = msg.seq;
    this.afterChange();
  }

  onStatus(status) {
    if (!this.alive) return;
    this.updated.dataset.status = status;
    this.updated.textContent = status === 'open' ? 'Live' : status === 'closed' ? '' : 'Reconnecting…';
  }

  /** Moves a card to `state` at once; back where it was when the server refuses. */
  async moveTask(id, state) {
    const c = this.cards.get(id);
    if (!c) return;
    const from = taskState(c.task);
    if (from === state) return;
    const show = (where) => {
      c.el.dataset.state = where;
      const sel = c.el.querySelector('select');
      if (sel) sel.value = where;
      this.sortColumns();
    };
    this.pending.add(id);
    this.place(c.el, c.task, state); // optimistic
    show(state);
    try {
      const t = await api.setState(id, state);
      this.pending.delete(id);
      if (t && t.id) this.upsert(t);
      this.afterChange();
    } catch (e) {
      this.pending.delete(id);
      this.place(c.el, c.task); // snap back
      show(from);
      c.el.classList.add('refused');
      setTimeout(() => c.el.classList.remove('refused'), 1200);
      toast(`Cannot move “${c.task.title}” to ${STATE_LABELS[state]}: ${e.message}`, 'error');
    }
  }

  async createTask() {
    const sent = await taskDialog(null, (body) => api.createTask(this.boardId, body));
    if (!sent) return;
    toast('Task created.'); // its card is pushed
  }

  async editTask(id) {
    const c = this.cards.get(id);
    if (!c) return;
    await taskDialog(c.task, (body) => api.updateTask(id, body)); // the change is pushed
  }

  async deleteTask(id) {
    const c = this.cards.get(id);
    if (!c) return;
    if (!(await confirmDialog('Delete task', `Delete “${c.task.title}”? This cannot be undone.`))) return;
    try { await api.deleteTask(id); this.removeCard(id); this.afterChange(); } catch (e) { toast(`Could not delete: ${e.message}`, 'error'); }
  }

  cleanup() {
    this.alive = false;
    this.live.close();
    this.unfollow();
  }
}
