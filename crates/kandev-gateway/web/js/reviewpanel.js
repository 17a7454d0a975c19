// The review loop of the Changes tab: the Review box (drafts, the general
// comment, Request changes, Approve & push), the comment box opened under
// a diff line, and the comments kept from earlier requests for changes
// (above the file list, in the shown file's diff, counted per file). The
// pieces it draws with are in review.js; the files and diffs in changes.js.

import { h, clear, toast } from './dom.js';
import { api } from './api.js';
import { STATE } from './common.js';
import { commentBox, decorateDiff, placeWords, threadEl } from './review.js';

export class ReviewPanel {
  /**
   * The review of task `taskId`; `list`: the changes' file list, `diffBox`:
   * where the diff shows, `onReviewed(result)`: a review went.
   */
  constructor(taskId, { list, diffBox, onReviewed }) {
    this.taskId = taskId;
    this.list = list;
    this.diffBox = diffBox;
    this.onReviewed = onReviewed;
    this.root = null;       // the Changes tab's element, once built
    this.kept = [];         // the comments of earlier requests for changes
    this.filePaths = null;  // the changed files' paths, once listed
    this.shown = null;      // the file whose diff shows: {path, rows, fileEl, aboveBox}
    this.box = null;        // the open comment box: {el, focus, back, target}
    this.drafts = [];       // comments not sent yet: {path, line, side, line_text, body, draft}
    this.current = null;    // the task
    this.hasClone = false;
    this.busy = false;
    this.threadOpts = { onResolve: (c, resolved) => this.resolve(c, resolved), onRemove: (c) => this.removeDraft(c) };
    // The comments kept from earlier requests for changes: those on the
    // whole change (or on a file no longer changed) above the file list.
    this.generalBox = h('section', { class: 'review-general', testid: 'review-general', hidden: true, 'aria-label': 'Review comments on the whole change' });
    this.build();
  }

  /** The review form: shown while the task is in review. */
  build() {
    this.commentList = h('ul', { class: 'review-comments', testid: 'review-comments' });
    this.message = h('textarea', { rows: 2, class: 'review-message', testid: 'review-message', placeholder: 'A general comment, or the commit message when approving', 'aria-label': 'Review message' });
    this.requestBtn = h('button', { type: 'button', class: 'btn', testid: 'review-request-changes', onclick: () => this.submit('request_changes') }, 'Request changes');
    this.approveBtn = h('button', { type: 'button', class: 'btn btn-primary', testid: 'review-approve', onclick: () => this.submit('approve') }, 'Approve & push');
    this.mergeBox = h('input', { type: 'checkbox', id: `review-merge-${this.taskId}`, testid: 'review-merge' });
    const mergeLabel = h('label', { for: `review-merge-${this.taskId}`, class: 'small' }, this.mergeBox, ' Approve merges into the base branch (no pull request)');
    this.el = h('section', { class: 'review', testid: 'review', hidden: true, 'aria-label': 'Review' },
      h('h2', null, 'Review'),
      h('p', { class: 'muted small', testid: 'review-hint' }, 'Click a line of the diff to comment on it, or from the keyboard: Tab to the diff, ↑/↓ to the line, then Enter or C.'),
      this.commentList, this.message, h('div', { class: 'row' }, this.requestBtn, this.approveBtn, mergeLabel));
  }

  canComment() { return !this.el.hidden && !!this.current && this.current.state === STATE.REVIEW; }

  setTask(task) {
    this.current = task;
    this.showReview();
    if (task) this.message.placeholder = `A general comment; or, approving, the commit message (default: “${task.title}” with the agent's summary)`;
  }

  /** Whether the task has a clone to deliver from (none: no review form). */
  setClone(has) {
    this.hasClone = has;
    this.showReview();
  }

  // In review: comments or approval; completed: delivery only; never
  // without a clone to deliver from.
  showReview() {
    const { current } = this;
    this.el.hidden = !current || !this.hasClone || ![STATE.REVIEW, STATE.COMPLETED].includes(current.state);
    this.requestBtn.hidden = !current || current.state !== STATE.REVIEW;
    for (const b of this.diffBox.querySelectorAll('[data-testid=review-file-comment]')) b.hidden = !this.canComment();
    if (!this.canComment()) this.closeBox(false);
  }

  // Opens the comment box under `row` (a diff line, or the box above the
  // file for a comment on the whole file) for `target`; closed, the focus
  // goes back to `back`.
  openBox(row, target, back = row) {
    this.closeBox(false);
    const opened = commentBox({
      label: placeWords(target),
      onAdd: (body) => { this.drafts.push({ ...target, body, draft: true }); this.closeBox(); this.renderDrafts(); this.redecorate(); },
      onClose: () => this.closeBox(),
    });
    this.box = { ...opened, back, target };
    row.after(this.box.el);
    this.box.focus();
  }

  // Closes the comment box; the focus goes back to its line.
  closeBox(refocus = true) {
    if (!this.box) return;
    const { el: boxEl, back } = this.box;
    this.box = null;
    boxEl.remove();
    if (refocus && back.isConnected) back.focus();
  }

  /** Whether the comment box has the focus (someone is typing in it). */
  typing() { return !!this.box && this.box.el.contains(document.activeElement); }

  removeDraft(c) {
    const i = this.drafts.indexOf(c);
    if (i >= 0) this.drafts.splice(i, 1);
    this.renderDrafts(); this.redecorate();
  }

  renderDrafts() {
    clear(this.commentList).append(...this.drafts.map((c) => h('li', { testid: 'review-comment' },
      h('span', { class: 'muted small' }, placeWords(c)), ' ', h('span', { class: 'review-body' }, c.body), ' ',
      h('button', { type: 'button', class: 'btn btn-ghost btn-small', 'aria-label': 'Remove the comment', onclick: () => this.removeDraft(c) }, '×'))));
  }

  // The shown file's comments, kept and drafts, in its diff.
  redecorate() {
    const { shown } = this;
    if (!shown || !shown.fileEl.isConnected) return;
    const mine = (c) => c.path === shown.path;
    decorateDiff(shown.fileEl, shown.aboveBox, shown.rows, [...this.kept.filter(mine), ...this.drafts.filter(mine)], this.threadOpts);
  }

  /** The changed files' paths (null: none listed); their comments are counted again. */
  setFiles(paths) {
    this.filePaths = paths;
    if (!paths) this.shown = null;
    this.renderGeneral();
  }

  // Comments on the whole change, and those on files no longer changed;
  // each file's count of open comments.
  renderGeneral() {
    const { kept, filePaths } = this;
    const elsewhere = filePaths ? kept.filter((c) => c.path && !filePaths.has(c.path)) : [];
    const general = filePaths ? kept.filter((c) => !c.path) : kept;
    clear(this.generalBox).append(
      h('h2', null, 'Review comments'),
      ...general.map((c) => threadEl(c, { ...this.threadOpts, showPlace: !!c.path })),
      ...elsewhere.map((c) => threadEl(c, { ...this.threadOpts, outdated: true })));
    this.generalBox.hidden = !general.length && !elsewhere.length;
    for (const b of this.list.querySelectorAll('[data-testid=changes-file]')) {
      const open = kept.filter((c) => c.path === b.dataset.path && !c.resolved).length;
      const count = b.querySelector('[data-testid=changes-file-comments]');
      if (!count) continue;
      count.textContent = String(open);
      count.hidden = !open;
      count.title = `${open} open review comment${open === 1 ? '' : 's'}`;
    }
  }

  async loadKept() {
    try {
      this.kept = (await api.reviewComments(this.taskId)).comments || [];
    } catch (e) {
      if (e.status !== 404) toast(`Cannot read the review comments: ${e.message}`, 'error');
      return;
    }
    this.renderGeneral(); this.redecorate();
  }

  async resolve(c, resolved) {
    try {
      const fresh = await api.resolveComment(this.taskId, c.id, resolved);
      this.kept = this.kept.map((k) => (k.id === fresh.id ? fresh : k));
      this.renderGeneral(); this.redecorate();
      const again = [...this.root.querySelectorAll(`[data-comment-id="${fresh.id}"] [data-testid=review-resolve]`)]
        .find((b) => b.offsetParent !== null);
      if (again) again.focus();
    } catch (e) {
      toast(`Cannot ${resolved ? 'resolve' : 'reopen'} the comment: ${e.message}`, 'error');
    }
  }

  /** The review's body for `action`, or null (and why) when there is nothing to send. */
  body(action) {
    const body = { action, message: this.message.value.trim() };
    if (action === 'approve' && this.mergeBox.checked) body.merge = true;
    if (action === 'request_changes') {
      body.comments = this.drafts.map((c) => ({ path: c.path, line: c.line, side: c.side, line_text: c.line_text, body: c.body }));
      if (!body.comments.length && !body.message) { toast('Add a comment or a message first.', 'error'); return null; }
    }
    return body;
  }

  async submit(action) {
    if (this.busy) return;
    const body = this.body(action);
    if (!body) return;
    this.busy = true; this.requestBtn.disabled = this.approveBtn.disabled = true;
    try {
      const r = await api.review(this.taskId, body);
      this.drafts.length = 0; this.renderDrafts(); this.redecorate(); this.message.value = '';
      if (action === 'approve' && r.delivery) {
        const d = r.delivery;
        toast(`Approved: ${d.branch} @ ${d.commit.slice(0, 12)}${d.pushed_to ? ` pushed to ${d.pushed_to}` : ''}${d.pull_request_url ? `; pull request ${d.pull_request_url}` : ''}`, 'info', 15000);
      } else toast('Changes requested: the agent is on it.', 'info');
      this.loadKept();
      if (this.onReviewed) this.onReviewed(r);
    } catch (e) {
      toast(`Review failed: ${e.message}`, 'error', 10000);
    } finally {
      this.busy = false; this.requestBtn.disabled = this.approveBtn.disabled = false;
    }
  }

  /** The file `shown` ({path, rows, fileEl, aboveBox}) was drawn: its comments, and the open box, go in. */
  showFile(shown, typing) {
    this.shown = shown;
    this.redecorate();
    this.keepBox(typing);
  }

  // The diff was drawn again (a reload, the file shown again): an open
  // comment box moves, with what is typed in it, under its line in the new
  // diff; it closes when its file or line is no longer shown.
  keepBox(typing) {
    const { box, shown } = this;
    if (!box) return;
    const { path, line, side } = box.target;
    const body = [...shown.fileEl.querySelectorAll('.diff-body')].find((b) => b.offsetParent !== null);
    const row = path !== shown.path ? null
      : !line ? shown.aboveBox
        : body && body.querySelector(`:scope > [data-${side}-line="${line}"]`);
    if (!row) { this.box = null; return; }
    if (line) box.back = row;
    else box.back = shown.fileEl.querySelector('[data-testid=review-file-comment]') || row;
    row.after(box.el);
    if (typing) box.focus();
  }
}
