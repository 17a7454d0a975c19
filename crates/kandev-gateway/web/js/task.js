// The task view: live agent feed over the task stream, follow-up prompts,
// start / cancel / stop, the changes on the task's branch, logs and
// attempt history. It puts the page's parts together: its state
// (taskstate.js), the head (taskhead.js), the side column (taskside.js),
// the composer (taskprompt.js), the Changes, Logs and History tabs
// (changes.js, tasklogs.js, taskhistory.js) and the feed (feed.js).

import { h, clear, toast, confirmDialog } from './dom.js';
import { api, asList, humanizeStates } from './api.js';
import { Feed } from './feed.js';
import { TaskSocket } from './socket.js';
import { FeedPager } from './feedpages.js';
import { changesPanel } from './changes.js';
import { TaskModel, logLine } from './taskstate.js';
import { taskHead } from './taskhead.js';
import { taskSide } from './taskside.js';
import { promptBox } from './taskprompt.js';
import { logsPanel } from './tasklogs.js';
import { historyPanel } from './taskhistory.js';
import { STATE, taskDialog, agentTypes, agentTypeId } from './common.js';

const STATUS_POLL_MS = 2000;
const TABS = ['feed', 'changes', 'logs', 'history'];

/** The tab list; `select(name)` shows a tab's panel. Arrow keys move between tabs. */
function tabBar(select) {
  const buttons = {};
  const el = h('div', { class: 'tabs', role: 'tablist', 'aria-label': 'Task views' });
  const go = (t) => { select(t); buttons[t].focus(); };
  for (const t of TABS) {
    buttons[t] = h('button', { type: 'button', role: 'tab', id: `tab-${t}`, class: 'tab', testid: `tab-${t}`, 'aria-controls': `panel-${t}`,
      onclick: () => select(t), onkeydown: (e) => {
        const i = TABS.indexOf(t);
        if (e.key === 'ArrowRight') go(TABS[(i + 1) % TABS.length]);
        if (e.key === 'ArrowLeft') go(TABS[(i + TABS.length - 1) % TABS.length]);
      } }, t[0].toUpperCase() + t.slice(1));
    el.append(buttons[t]);
  }
  return { el, buttons };
}

export function taskView(main, taskId, { setCrumbs, debug }) {
  const page = new TaskPage(main, taskId, setCrumbs);
  page.debugHooks(debug);
  return () => page.cleanup();
}

class TaskPage {
  constructor(main, taskId, setCrumbs) {
    this.main = main;
    this.taskId = taskId;
    this.setCrumbs = setCrumbs;
    this.model = new TaskModel(taskId);
    this.build();
    this.select('feed');
    this.openStream();
    this.refresh();
    this.onVis = () => { if (!document.hidden) this.refresh(); };
    document.addEventListener('visibilitychange', this.onVis);
  }

  /** The page's parts, laid out. */
  build() {
    const { taskId } = this;
    this.head = taskHead({
      start: () => this.start(), cancel: () => this.cancelTurn(), stop: () => this.stop(),
      edit: () => this.edit(), markDone: () => this.markDone(),
    });
    this.side = taskSide(taskId, { onFixed: () => this.refreshSoon() });
    this.tabs = tabBar((t) => this.select(t));
    const feedBox = h('div', { class: 'feed', testid: 'feed', tabindex: '0', 'aria-label': 'Agent feed' });
    this.prompt = promptBox(taskId, { send: (text) => this.sendPrompt(text), changed: () => this.refresh(), input: () => this.updateButtons() });
    this.changes = changesPanel(taskId, { onReviewed: () => { this.refreshSoon(); this.changes.load(); } });
    this.logs = logsPanel(this.model);
    this.history = historyPanel(this.model, { onLogs: (iid) => { this.select('logs'); this.logs.load(iid); } });
    this.panels = {
      feed: h('div', { class: 'panel panel-feed', id: 'panel-feed', role: 'tabpanel', 'aria-labelledby': 'tab-feed' }, feedBox, ...this.prompt.parts),
      changes: h('div', { class: 'panel', id: 'panel-changes', role: 'tabpanel', 'aria-labelledby': 'tab-changes', hidden: true }, this.changes.el),
      logs: this.logs.el,
      history: this.history.el,
    };
    clear(this.main).append(
      this.head.el,
      this.head.failure.el,
      h('div', { class: 'task-layout' },
        h('div', { class: 'task-main' }, this.tabs.el, this.panels.feed, this.panels.changes, this.panels.logs, this.panels.history),
        this.side.el));
    this.feed = new Feed(feedBox, {
      onPermission: (requestId, optionId) => this.socket.command({ type: 'permission', request_id: requestId, option_id: optionId }),
      onEvent: (ev, frame) => this.onEvent(ev, frame),
    });
  }

  select(t) {
    for (const x of TABS) {
      const on = x === t;
      this.tabs.buttons[x].setAttribute('aria-selected', String(on));
      this.tabs.buttons[x].tabIndex = on ? 0 : -1;
      this.panels[x].hidden = !on;
    }
    if (t === 'feed') this.feed.shown();
    if (t === 'changes') this.changes.load();
    if (t === 'logs') this.logs.load();
    if (t === 'history') this.history.load();
  }

  /** The task stream: the newest page of the compacted feed first, then the frames after it. */
  openStream() {
    this.socket = new TaskSocket(this.taskId, {
      lastSeq: () => this.feed.lastSeq,
      onFrame: (f) => this.feed.push(f),
      onControl: (c) => {
        if (c.type === 'error') this.feed.pushNotice('error', `Server: ${humanizeStates(c.message || c.error || 'error')}`);
        else if (c.type === 'lagging') this.feed.pushNotice('note', 'The connection fell behind; resuming…');
      },
      onStatus: (s) => { this.head.socketStatus(s); this.scheduleButtons(); },
    });
    new FeedPager(this.feed, this.taskId).openNewest().finally(() => this.socket.open());
  }

  /** A feed event: the model takes it in, the page shows what it changed. */
  onEvent(ev, frame) {
    const d = ev.data || {};
    this.model.note(ev, frame);
    switch (ev.kind) {
      case 'turn_end':
        this.refreshSoon();
        // The turn's edits are in: show them.
        if (!this.panels.changes.hidden) this.changes.load();
        break;
      case 'lifecycle':
        if (['closed', 'session_created', 'session_loaded'].includes(d.phase)) this.refreshSoon();
        break;
      case 'plan': this.side.plan(d.entries || []); break;
      case 'usage': this.side.usage(this.model.usage); break;
      case 'log': this.logs.live(logLine(d)); break;
      default: break;
    }
    this.scheduleButtons();
  }

  scheduleButtons() {
    if (this.btnScheduled) return;
    this.btnScheduled = true;
    requestAnimationFrame(() => { this.btnScheduled = false; this.updateButtons(); });
  }

  refreshSoon() { clearTimeout(this.refreshTimer); this.refreshTimer = setTimeout(() => this.refresh(), 250); }

  async refresh() {
    const { model } = this;
    clearTimeout(this.statusTimer);
    try {
      await model.load();
      if (!model.alive) return;
      this.render();
    } catch (e) {
      if (!model.alive) return;
      if (e.status === 404) { this.gone(); return; }
    }
    if (model.alive) this.statusTimer = setTimeout(() => this.refresh(), STATUS_POLL_MS);
  }

  gone() {
    clear(this.main).append(h('p', { class: 'empty' }, 'This task does not exist (any more).'), h('a', { href: '#/boards' }, 'Back to boards'));
    this.cleanup();
  }

  render() {
    const { model } = this;
    const { task } = model;
    document.title = `${task.title} · Kandev`;
    this.changes.setTask(task);
    this.head.render(model);
    this.renderMarkDone();
    this.loadBoardName();
    this.setCrumbs([{ href: '#/boards', text: 'Boards' },
      { href: `#/boards/${encodeURIComponent(task.board_id)}`, text: model.boardName || 'Board', testid: 'crumb-board' }, { text: task.title }]);
    if (this.feed.policy === undefined && task.agent_type) {
      this.feed.policy = null;
      agentTypes().then((types) => {
        const t = types.find((x) => agentTypeId(x) === task.agent_type);
        this.feed.setPolicy(t ? t.permission_policy || null : null);
      });
    }
    this.side.render(model, !this.head.failure.el.hidden);
    this.updateButtons();
  }

  // A task in review with nothing to review: no repository, or no change
  // on its branch (asked once per task version; null: not known, or the
  // changes could not be read).
  renderMarkDone() {
    const { model } = this;
    const { task } = model;
    const noRepo = !task.repository_url;
    const inReview = model.state === STATE.REVIEW;
    if (inReview && !noRepo && this.changesFor !== task.version) {
      this.changesFor = task.version;
      this.hasChanges = null;
      api.changes(this.taskId).then((c) => { this.hasChanges = asList(c, 'files').length > 0; },
        () => { this.hasChanges = null; }).then(() => { if (model.alive && model.task) this.renderMarkDone(); });
    }
    const done = this.head.buttons.done;
    done.hidden = !(inReview && (noRepo || this.hasChanges === false));
    done.title = noRepo ? 'Nothing to review: the task has no repository. Move it to Completed.'
      : 'Nothing to review: the agent changed no file. Move the task to Completed.';
  }

  async markDone() {
    const done = this.head.buttons.done;
    done.disabled = true;
    try {
      this.model.task = await api.setState(this.taskId, STATE.COMPLETED);
      toast('Marked done.');
    } catch (e) {
      toast(`Could not mark it done: ${e.message}`, 'error');
    } finally { done.disabled = false; this.refresh(); }
  }

  loadBoardName() {
    const { model } = this;
    if (this.boardAsked === model.task.board_id) return;
    this.boardAsked = model.task.board_id;
    api.board(model.task.board_id).then((b) => {
      if (!model.alive || !b) return;
      model.boardName = b.name || null;
      if (model.task) this.render();
    }).catch(() => {});
  }

  updateButtons() {
    this.head.update(this.model, this.socket.isOpen);
    this.prompt.update(this.model);
  }

  /** Runs `request` with the buttons off; then reads the task again. */
  async busyWith(request) {
    this.model.busy = true; this.updateButtons();
    try { return await request(); } finally { this.model.busy = false; this.refresh(); }
  }

  start() {
    return this.busyWith(async () => {
      try {
        this.model.status = await api.start(this.taskId, {});
        toast('Agent starting.');
      } catch (e) { toast(`Could not start: ${e.message}`, 'error'); }
    });
  }

  async stop() {
    if (!(await confirmDialog('Stop the agent', 'Stop the agent now? The current turn is abandoned.', 'Stop'))) return;
    await this.busyWith(async () => {
      try { this.model.status = await api.stop(this.taskId, { reason: 'stopped from the UI' }); toast('Agent stopping.'); }
      catch (e) { toast(`Could not stop: ${e.message}`, 'error'); }
    });
  }

  async cancelTurn() {
    this.head.buttons.cancel.disabled = true;
    try { await this.socket.command({ type: 'cancel' }); toast('Cancel requested.'); }
    catch (e) { toast(`Could not cancel: ${e.message}`, 'error'); this.updateButtons(); }
  }

  /** Sends a follow-up; true once it went. */
  sendPrompt(text) {
    const holds = this.model.holds;
    return this.busyWith(async () => {
      try {
        // The socket command runs a follow-up (held by the orchestrator while
        // a turn runs), or starts a new run that resumes the session; REST
        // start is the fallback.
        if (this.socket.isOpen) await this.socket.command({ type: 'prompt', text });
        else this.model.status = await api.start(this.taskId, { prompt: text });
        toast(holds ? 'Queued: sent when the agent finishes this turn.' : 'Follow-up sent.');
        return true;
      } catch (e) {
        toast(`Could not send: ${e.message}`, 'error');
        return false;
      }
    });
  }

  async edit() {
    const { task } = this.model;
    if (!task) return;
    if (await taskDialog(task, (body) => api.updateTask(this.taskId, body))) this.refresh();
  }

  /** Stable hooks for tests (defineProperties, not Object.assign: the getters must stay live). */
  debugHooks(debug) {
    const page = this;
    Object.defineProperties(debug, Object.getOwnPropertyDescriptors({
      closeSocket: () => page.socket.drop(),
      get reconnects() { return page.socket.reconnects; },
      get socketStatus() { return page.socket.status; },
      get lastSeq() { return page.feed.lastSeq; },
      get duplicatesIgnored() { return page.feed.duplicatesIgnored; },
      get feedItems() { return page.feed.items.length; },
      get eventsApplied() { return page.feed.applied; },
      // The compacted feed's pages: more before the loaded ones, one loading.
      get olderPages() { return !!(page.feed.pager && page.feed.pager.hasMore); },
      get loadingPage() { return !!(page.feed.pager && page.feed.pager.loading); },
      feed: page.feed,
    }));
  }

  cleanup() {
    this.model.alive = false;
    clearTimeout(this.statusTimer);
    clearTimeout(this.refreshTimer);
    this.socket.close();
    document.removeEventListener('visibilitychange', this.onVis);
  }
}
