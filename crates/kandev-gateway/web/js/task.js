// The task view: live agent feed over the task stream, follow-up prompts,
// start / cancel / stop, the changes on the task's branch, logs and
// attempt history.

import { h, clear, toast, confirmDialog, fmtTime, labelCells } from './dom.js';
import { api, taskState, asList, humanizeStates } from './api.js';
import { renderMarkdown } from './markdown.js';
import { Feed, renderPlan, stopWords } from './feed.js';
import { TaskSocket } from './socket.js';
import { FeedPager } from './feedpages.js';
import { changesPanel } from './changes.js';
import { pendingBox, pendingPrompts } from './followups.js';
import { checksPanel } from './checks.js';
import { STATE, STATE_LABELS, execBadge, execState, ACTIVE_EXEC, taskDialog, plainError, failureText, agentTypes, agentTypeId } from './common.js';

const STATUS_POLL_MS = 2000;
// The live connection's states: [what the header says, its tooltip].
const SOCKET_WORDS = {
  idle: ['Connecting…', 'Connecting to the live updates'],
  connecting: ['Connecting…', 'Connecting to the live updates'],
  open: ['Live', 'The agent’s activity shows here as it happens'],
  reconnecting: ['Reconnecting…', 'The connection dropped; catching up as soon as it is back'],
  closed: ['Offline', 'No live updates'],
};
const EXEC_WORDS = {
  none: 'Never started', idle: 'Idle', queued: 'Queued', launching: 'Starting', running: 'Running',
  retry_wait: 'Waiting to retry', completed: 'Finished', failed: 'Failed', stopped: 'Stopped',
};

// A task change (GET /tasks/{id}/events), in words: what happened, and
// what changed (the fields by name, never counted).
const CHANGE_WORDS = { created: 'Created', updated: 'Edited', state_changed: 'Moved', deleted: 'Deleted' };
const FIELD_WORDS = {
  title: 'title', description: 'description', priority: 'priority', agent_type: 'agent type',
  repository_url: 'repository', branch: 'branch', metadata: 'run details', position: 'position',
  workspace_path: 'workspace', max_retries: 'retries', autostart: 'start on creation',
};

function describeChange(e) {
  const pick = (v) => (v && typeof v === 'object' ? v.state ?? v.to ?? null : v);
  if (e.kind === 'state_changed') {
    const from = pick(e.old_value), to = pick(e.new_value);
    const reason = (e.new_value && e.new_value.reason) || '';
    const label = (s) => (s ? STATE_LABELS[String(s).replace(/^TASK_STATE_/, '')] || s : '?');
    return `${label(from)} → ${label(to)}${reason ? ` (${reason})` : ''}`;
  }
  if (e.kind === 'created') return e.new_value?.title ? `“${e.new_value.title}”` : '';
  if (e.kind === 'updated' && e.new_value && typeof e.new_value === 'object') {
    const names = Object.keys(e.new_value).map((k) => FIELD_WORDS[k]).filter(Boolean);
    return names.length ? `Changed the ${listWords(names)}` : '';
  }
  return '';
}

/** "a", "a and b", "a, b and c". */
function listWords(words) {
  return words.length < 2 ? words.join('') : `${words.slice(0, -1).join(', ')} and ${words[words.length - 1]}`;
}

export function taskView(main, taskId, { setCrumbs, debug }) {
  let alive = true;
  let task = null;
  let status = null;
  let turnActive = false;
  let busy = false;          // a start/stop request is in flight
  let usage = null;
  let statusTimer = null;
  let pending = [];          // follow-ups held until the turn ends
  const runs = new Map();    // instance_id -> {first, last, turns, stopReason, seqFrom, seqTo}
  const liveLogs = [];

  // ---- layout ----
  const title = h('h1', { class: 'page-title', testid: 'task-title' }, 'Task');
  const stateBadge = h('span', { class: 'badge', testid: 'task-state' });
  const execEl = h('span', { class: 'badge', testid: 'exec-status', hidden: true });
  const failureReason = h('p', { class: 'failure-reason', testid: 'failure-reason' });
  const failureRaw = h('pre', { class: 'failure-raw', testid: 'failure-raw' });
  const failureBox = h('div', { class: 'failure', testid: 'task-failure', role: 'alert', hidden: true },
    h('strong', { class: 'failure-head' }, 'Why it failed'), failureReason,
    h('details', { class: 'failure-details', testid: 'failure-details' }, h('summary', null, 'Details'), failureRaw));
  let boardName = null;
  const sockEl = h('span', { class: 'sock', testid: 'socket-status', dataset: { status: 'idle' } });
  const startBtn = h('button', { type: 'button', class: 'btn btn-primary', testid: 'btn-start', onclick: () => start() }, 'Start');
  const cancelBtn = h('button', { type: 'button', class: 'btn', testid: 'btn-cancel', onclick: cancelTurn, title: 'Cancel the current turn' }, 'Cancel turn');
  const stopBtn = h('button', { type: 'button', class: 'btn btn-danger', testid: 'btn-stop', onclick: stop, title: 'Stop the agent' }, 'Stop');
  const editBtn = h('button', { type: 'button', class: 'btn btn-ghost', testid: 'btn-edit', onclick: edit }, 'Edit');
  // A task in review with nothing to review (no repository, or no change
  // on its branch) is finished here instead of through the state menu.
  const doneBtn = h('button', { type: 'button', class: 'btn btn-primary', testid: 'btn-mark-done', hidden: true, onclick: markDone }, 'Mark done');

  const tabs = ['feed', 'changes', 'logs', 'history'];
  const tabBtns = {};
  const panels = {};
  const tablist = h('div', { class: 'tabs', role: 'tablist', 'aria-label': 'Task views' });
  for (const t of tabs) {
    tabBtns[t] = h('button', { type: 'button', role: 'tab', id: `tab-${t}`, class: 'tab', testid: `tab-${t}`, 'aria-controls': `panel-${t}`,
      onclick: () => select(t), onkeydown: (e) => {
        const i = tabs.indexOf(t);
        if (e.key === 'ArrowRight') { select(tabs[(i + 1) % tabs.length]); tabBtns[tabs[(i + 1) % tabs.length]].focus(); }
        if (e.key === 'ArrowLeft') { const prev = tabs[(i + tabs.length - 1) % tabs.length]; select(prev); tabBtns[prev].focus(); }
      } }, t[0].toUpperCase() + t.slice(1));
    tablist.append(tabBtns[t]);
  }

  const feedBox = h('div', { class: 'feed', testid: 'feed', tabindex: '0', 'aria-label': 'Agent feed' });
  const promptInput = h('textarea', { id: 'prompt-input', class: 'prompt-input', rows: 2, testid: 'prompt-input', placeholder: 'Send a follow-up to the agent… (Ctrl+Enter)' });
  const sendBtn = h('button', { type: 'submit', class: 'btn btn-primary', testid: 'prompt-send' }, 'Send');
  const promptForm = h('form', { class: 'prompt-form', testid: 'prompt-form' },
    h('label', { for: 'prompt-input', class: 'sr-only' }, 'Follow-up prompt'), promptInput, sendBtn);
  promptForm.addEventListener('submit', (e) => { e.preventDefault(); sendPrompt(); });
  promptInput.addEventListener('keydown', (e) => { if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); sendPrompt(); } });
  promptInput.addEventListener('input', updateButtons);
  // Why the box sends now, later, or not at all.
  const promptHint = h('p', { class: 'prompt-hint muted small', testid: 'prompt-hint', hidden: true });
  const queue = pendingBox(taskId, { changed: () => refresh() });
  panels.feed = h('div', { class: 'panel panel-feed', id: 'panel-feed', role: 'tabpanel', 'aria-labelledby': 'tab-feed' }, feedBox, queue.el, promptHint, promptForm);

  const logsPre = h('pre', { class: 'logs', testid: 'logs', tabindex: '0', 'aria-label': 'Agent logs' });
  const logsInfo = h('p', { class: 'muted small', testid: 'logs-info' });
  panels.logs = h('div', { class: 'panel', id: 'panel-logs', role: 'tabpanel', 'aria-labelledby': 'tab-logs', hidden: true },
    h('div', { class: 'row' }, logsInfo, h('button', { type: 'button', class: 'btn btn-small', testid: 'logs-refresh', onclick: () => loadLogs() }, 'Refresh')), logsPre);

  const changes = changesPanel(taskId, { onReviewed: () => { refreshSoon(); changes.load(); } });
  panels.changes = h('div', { class: 'panel', id: 'panel-changes', role: 'tabpanel', 'aria-labelledby': 'tab-changes', hidden: true }, changes.el);

  const historyBox = h('div', { class: 'history', testid: 'history' });
  panels.history = h('div', { class: 'panel', id: 'panel-history', role: 'tabpanel', 'aria-labelledby': 'tab-history', hidden: true }, historyBox);

  const planBox = h('div', { class: 'side-plan', testid: 'plan' }, h('p', { class: 'muted' }, 'No plan yet.'));
  const details = h('div', { class: 'side-details', testid: 'task-details' });
  const execInfo = h('dl', { class: 'kv', testid: 'exec-info' });
  const usageEl = h('p', { class: 'muted small', testid: 'usage' });
  const checks = checksPanel(taskId, { onFixed: () => refreshSoon() });

  clear(main).append(
    h('div', { class: 'page-head task-head' },
      h('div', { class: 'title-wrap' }, title, h('div', { class: 'badges' }, stateBadge, execEl)),
      h('div', { class: 'page-actions' },
        sockEl,
        doneBtn, startBtn, cancelBtn, stopBtn, editBtn)),
    failureBox,
    h('div', { class: 'task-layout' },
      h('div', { class: 'task-main' }, tablist, panels.feed, panels.changes, panels.logs, panels.history),
      h('aside', { class: 'task-side', 'aria-label': 'Task details' },
        h('section', null, h('h2', null, 'Plan'), planBox),
        h('section', null, h('h2', null, 'Execution'), execInfo, usageEl),
        checks.el,
        h('section', null, h('h2', null, 'Details'), details))));

  function select(t) {
    for (const x of tabs) {
      const on = x === t;
      tabBtns[x].setAttribute('aria-selected', String(on));
      tabBtns[x].tabIndex = on ? 0 : -1;
      panels[x].hidden = !on;
    }
    if (t === 'feed') feed.shown();
    if (t === 'changes') changes.load();
    if (t === 'logs') loadLogs();
    if (t === 'history') loadHistory();
  }

  // ---- feed + socket ----
  const feed = new Feed(feedBox, {
    onPermission: (requestId, optionId) => socket.command({ type: 'permission', request_id: requestId, option_id: optionId }),
    onEvent: onEvent,
  });
  select('feed');

  function onEvent(ev, frame) {
    const d = ev.data || {};
    const iid = frame.instance_id || 'unknown';
    let run = runs.get(iid);
    if (!run) { run = { instanceId: iid, first: ev.timestamp, last: ev.timestamp, turns: 0, stopReason: null, seqFrom: frame.seq, seqTo: frame.seq }; runs.set(iid, run); }
    run.last = ev.timestamp; run.seqTo = frame.seq;
    switch (ev.kind) {
      case 'turn_end':
        turnActive = false; run.turns++; run.stopReason = d.stop_reason; refreshSoon();
        // The turn's edits are in: show them.
        if (!panels.changes.hidden) changes.load();
        break;
      case 'lifecycle':
        if (d.phase === 'turn_started') turnActive = true;
        if (d.phase === 'closed') { turnActive = false; refreshSoon(); }
        if (d.phase === 'session_created' || d.phase === 'session_loaded') refreshSoon();
        break;
      case 'other': if (ev.direction === 'to_agent' && d.method === 'session/prompt') turnActive = true; break;
      case 'plan': clear(planBox).append(renderPlan(d.entries || [])); break;
      case 'usage': usage = d; renderUsage(); break;
      case 'log': {
        liveLogs.push(`${d.level ? `[${d.level}] ` : ''}${d.line}`);
        if (liveLogs.length > 5000) liveLogs.splice(0, liveLogs.length - 5000);
        if (!panels.logs.hidden) appendLog(`${d.level ? `[${d.level}] ` : ''}${d.line}`);
        break;
      }
      default: break;
    }
    scheduleButtons();
  }

  let btnScheduled = false;
  function scheduleButtons() {
    if (btnScheduled) return;
    btnScheduled = true;
    requestAnimationFrame(() => { btnScheduled = false; updateButtons(); });
  }

  const socket = new TaskSocket(taskId, {
    lastSeq: () => feed.lastSeq,
    onFrame: (f) => feed.push(f),
    onControl: (c) => {
      if (c.type === 'error') {
        const msg = c.message || c.error || 'error';
        feed.pushNotice('error', `Server: ${humanizeStates(msg)}`);
      } else if (c.type === 'lagging') feed.pushNotice('note', 'The connection fell behind; resuming…');
    },
    onStatus: (s) => {
      const [text, tip] = SOCKET_WORDS[s] || SOCKET_WORDS.connecting;
      sockEl.textContent = text;
      sockEl.title = tip;
      sockEl.dataset.status = s;
      scheduleButtons();
    },
  });
  // The newest page of the compacted feed first, then the frames after it.
  new FeedPager(feed, taskId).openNewest().finally(() => socket.open());

  // ---- status ----
  let refreshTimer = null;
  function refreshSoon() { clearTimeout(refreshTimer); refreshTimer = setTimeout(refresh, 250); }

  async function refresh() {
    clearTimeout(statusTimer);
    try {
      const [t, s, held] = await Promise.all([api.task(taskId), api.status(taskId).catch((e) => (e.status === 404 ? null : Promise.reject(e))),
        pendingPrompts(taskId).catch(() => pending)]);
      if (!alive) return;
      task = t; status = s; pending = held;
      renderTask();
    } catch (e) {
      if (!alive) return;
      if (e.status === 404) { clear(main).append(h('p', { class: 'empty' }, 'This task does not exist (any more).'), h('a', { href: '#/boards' }, 'Back to boards')); cleanup(); return; }
    }
    if (alive) statusTimer = setTimeout(refresh, STATUS_POLL_MS);
  }

  function renderTask() {
    const st = taskState(task);
    title.textContent = task.title;
    document.title = `${task.title} · Kandev`;
    stateBadge.textContent = STATE_LABELS[st] || st;
    stateBadge.title = STATE_LABELS[st] || st;
    stateBadge.className = `badge state-${st}`;
    stateBadge.dataset.state = st;
    changes.setTask(task);
    checks.update(task);
    // One badge per fact: the execution's only when it says something the
    // state does not (queued, running, retrying, an idle live task).
    const b = execBadge(status, st, 'page');
    execEl.hidden = !b;
    execEl.dataset.exec = execState(status);
    if (b) { execEl.textContent = b.text; execEl.title = b.title || b.text; execEl.className = `badge exec-${b.cls}`; }
    renderFailure(st);
    renderMarkDone(st);
    loadBoardName();
    setCrumbs([{ href: '#/boards', text: 'Boards' },
      { href: `#/boards/${encodeURIComponent(task.board_id)}`, text: boardName || 'Board', testid: 'crumb-board' }, { text: task.title }]);
    if (feed.policy === undefined && task.agent_type) {
      feed.policy = null;
      agentTypes().then((types) => {
        const t = types.find((x) => agentTypeId(x) === task.agent_type);
        feed.setPolicy(t ? t.permission_policy || null : null);
      });
    }
    const delivered = task.metadata && typeof task.metadata.delivered === 'object' ? task.metadata.delivered : null;
    const key = JSON.stringify([task.description, task.agent_type, task.repository_url, task.branch, task.priority, task.version, delivered]);
    if (details.dataset.key !== key) {
      details.dataset.key = key;
      const desc = h('div', { class: 'md desc' });
      desc.innerHTML = renderMarkdown(task.description || ''); // escaped by renderMarkdown
      clear(details).append(desc, h('dl', { class: 'kv' },
        kv('Agent', task.agent_type || '—'), kv('Priority', String(task.priority ?? 0)),
        kv('Repository', task.repository_url || '—'), kv('Branch', task.branch || '—'),
        kv('Created', fmtTime(task.created_at)), kv('By', task.created_by || '—'),
        delivered ? kv('Delivered', `${delivered.branch} @ ${String(delivered.commit || '').slice(0, 12)}`) : null,
        /^https?:\/\//.test(delivered?.pull_request || '') ? kv('Pull request', h('a', { href: delivered.pull_request, rel: 'noopener noreferrer', target: '_blank', testid: 'pull-request-link' }, delivered.pull_request)) : null));
    }
    clear(execInfo).append(...[
      kv('State', EXEC_WORDS[execState(status)] || execState(status)), kv('Attempts', String(status?.attempts ?? 0)),
      status?.queue_position ? kv('Queue position', String(status.queue_position)) : null,
      status?.instance_id ? kv('Instance', status.instance_id) : null,
      // The agent's image: "preparing the agent image … (step)", then how
      // long its build took (agent.preparing, kept in the metadata).
      typeof task.metadata?.agent_image === 'string' ? kv('Agent image', task.metadata.agent_image) : null,
      status?.last_error && failureBox.hidden ? kv('Last error', plainError(status.last_error).short) : null].flat().filter(Boolean));
    if (status?.last_error && failureBox.hidden) { execInfo.lastElementChild?.classList.add('error-text'); execInfo.lastElementChild.title = status.last_error; }
    updateButtons();
  }

  // A failed task leads with why, in plain words; the raw text is behind
  // Details. A run waiting to retry says what went wrong so far.
  function renderFailure(st) {
    const retrying = execState(status) === 'retry_wait' && status?.last_error;
    const raw = st === STATE.FAILED ? failureText(task, status) : retrying ? status.last_error : '';
    failureBox.hidden = !(st === STATE.FAILED || retrying);
    if (failureBox.hidden) return;
    const { short } = plainError(raw || 'No reason was recorded.');
    failureBox.classList.toggle('failure-retrying', !!retrying && st !== STATE.FAILED);
    failureBox.firstChild.textContent = st === STATE.FAILED ? 'Why it failed' : 'The last attempt failed; retrying';
    failureReason.textContent = short;
    failureRaw.textContent = raw || '(none)';
    failureBox.querySelector('details').hidden = !raw || raw === short;
  }

  // Whether the task's branch has changes, per task version (null: not
  // known, or the changes could not be read).
  let changesFor = null;
  let hasChanges = null;
  function renderMarkDone(st) {
    const noRepo = !task.repository_url;
    if (st === STATE.REVIEW && !noRepo && changesFor !== task.version) {
      changesFor = task.version;
      hasChanges = null;
      api.changes(taskId).then((c) => { hasChanges = asList(c, 'files').length > 0; },
        () => { hasChanges = null; }).then(() => { if (alive && task) renderMarkDone(taskState(task)); });
    }
    doneBtn.hidden = !(st === STATE.REVIEW && (noRepo || hasChanges === false));
    doneBtn.title = noRepo ? 'Nothing to review: the task has no repository. Move it to Completed.'
      : 'Nothing to review: the agent changed no file. Move the task to Completed.';
  }

  async function markDone() {
    doneBtn.disabled = true;
    try {
      task = await api.setState(taskId, STATE.COMPLETED);
      toast('Marked done.');
    } catch (e) {
      toast(`Could not mark it done: ${e.message}`, 'error');
    } finally { doneBtn.disabled = false; refresh(); }
  }

  let boardAsked = null;
  function loadBoardName() {
    if (boardAsked === task.board_id) return;
    boardAsked = task.board_id;
    api.board(task.board_id).then((b) => {
      if (!alive || !b) return;
      boardName = b.name || null;
      if (task) renderTask();
    }).catch(() => {});
  }

  function renderUsage() {
    if (!usage) return;
    const pct = usage.size ? Math.round((usage.used / usage.size) * 100) : 0;
    usageEl.textContent = `Context: ${usage.used.toLocaleString()} / ${usage.size.toLocaleString()} tokens (${pct}%)${usage.cost_amount != null ? ` · cost ${usage.cost_amount.toFixed(2)} ${usage.cost_currency || ''}` : ''}`;
  }

  function updateButtons() {
    const es = execState(status);
    const active = ACTIVE_EXEC.has(es);
    const running = es === 'running';
    // A run busy with a turn holds a follow-up until the turn ends; a run
    // still queued (or waiting to retry) takes one once it runs.
    const holds = running || es === 'launching' || es === 'starting';
    const waiting = active && !holds;
    const open = socket.isOpen;
    const terminal = task && [STATE.COMPLETED, STATE.CANCELLED].includes(taskState(task));
    startBtn.disabled = busy || !task || active;
    startBtn.textContent = !active && (terminal || (status && status.attempts > 0)) ? 'Restart' : 'Start';
    stopBtn.disabled = busy || !active;
    cancelBtn.disabled = !(open && running && turnActive);
    const text = promptInput.value.trim();
    sendBtn.disabled = !text || busy || !task || waiting;
    promptInput.disabled = busy || waiting;
    const queues = holds && (turnActive || !running);
    sendBtn.textContent = queues ? 'Queue' : running ? 'Send' : 'Send & start';
    sendBtn.title = queues ? 'The agent is working: this follow-up waits and is sent when it finishes this turn (Ctrl+Enter).' : '';
    promptHint.hidden = !(queues || waiting);
    promptHint.textContent = waiting ? 'The agent has not started yet: send a follow-up once it runs.'
      : 'The agent is working: a follow-up you send now is queued and sent when it finishes this turn.';
    queue.set(pending, holds);
  }

  async function start(prompt) {
    busy = true; updateButtons();
    try {
      status = await api.start(taskId, prompt ? { prompt } : {});
      toast(prompt ? 'Follow-up sent; agent starting.' : 'Agent starting.');
      return true;
    } catch (e) {
      toast(`Could not start: ${e.message}`, 'error');
      return false;
    } finally { busy = false; refresh(); }
  }

  async function stop() {
    if (!(await confirmDialog('Stop the agent', 'Stop the agent now? The current turn is abandoned.', 'Stop'))) return;
    busy = true; updateButtons();
    try { status = await api.stop(taskId, { reason: 'stopped from the UI' }); toast('Agent stopping.'); }
    catch (e) { toast(`Could not stop: ${e.message}`, 'error'); }
    finally { busy = false; refresh(); }
  }

  async function cancelTurn() {
    cancelBtn.disabled = true;
    try { await socket.command({ type: 'cancel' }); toast('Cancel requested.'); }
    catch (e) { toast(`Could not cancel: ${e.message}`, 'error'); updateButtons(); }
  }

  async function sendPrompt() {
    const text = promptInput.value.trim();
    if (!text || sendBtn.disabled) return;
    busy = true; updateButtons();
    const holds = ['running', 'launching', 'starting'].includes(execState(status));
    try {
      // The socket command runs a follow-up (held by the orchestrator while
      // a turn runs), or starts a new run that resumes the session; REST
      // start is the fallback.
      if (socket.isOpen) await socket.command({ type: 'prompt', text });
      else status = await api.start(taskId, { prompt: text });
      promptInput.value = '';
      toast(holds ? 'Queued: sent when the agent finishes this turn.' : 'Follow-up sent.');
    } catch (e) {
      toast(`Could not send: ${e.message}`, 'error');
    } finally { busy = false; refresh(); }
  }

  async function edit() {
    if (!task) return;
    if (await taskDialog(task, (body) => api.updateTask(taskId, body))) refresh();
  }

  // ---- logs ----
  function appendLog(line) {
    const atBottom = logsPre.scrollHeight - logsPre.scrollTop - logsPre.clientHeight < 40;
    logsPre.append(`${line}\n`);
    if (logsPre.childNodes.length > 6000) for (let i = 0; i < 1000; i++) logsPre.firstChild.remove();
    if (atBottom) logsPre.scrollTop = logsPre.scrollHeight;
  }

  async function loadLogs(instanceId) {
    const iid = instanceId || status?.instance_id;
    logsPre.textContent = '';
    if (!iid) {
      logsInfo.textContent = liveLogs.length ? 'Live log lines from the feed:' : 'No agent instance yet.';
      liveLogs.forEach(appendLog);
      return;
    }
    logsInfo.textContent = `Instance ${iid} — last 500 lines`;
    try {
      const data = await api.logs(iid, 500);
      // {lines: [{timestamp, stream, line}]}, as the gateway documents it.
      const lines = asList(data, 'lines').map((l) => `${l.stream !== 'stderr' ? `[${l.stream}] ` : ''}${l.line}`);
      lines.forEach(appendLog);
      if (!lines.length) logsInfo.textContent += ' (empty)';
    } catch (e) {
      logsInfo.textContent = `Could not load logs: ${e.message}. Live lines from the feed:`;
      liveLogs.forEach(appendLog);
    }
  }

  // ---- history ----
  async function loadHistory() {
    clear(historyBox).append(h('p', { class: 'muted' }, 'Loading…'));
    const runRows = [...runs.values()].filter((r) => r.instanceId !== 'unknown');
    const runsTable = h('table', { class: 'table', testid: 'attempts' },
      h('caption', null, `Agent instances (${status?.attempts ?? runRows.length} attempt${(status?.attempts ?? runRows.length) === 1 ? '' : 's'})`),
      h('thead', null, h('tr', null, h('th', { scope: 'col' }, '#'), h('th', { scope: 'col' }, 'Instance'), h('th', { scope: 'col' }, 'Started'), h('th', { scope: 'col' }, 'Last activity'), h('th', { scope: 'col' }, 'Turns'), h('th', { scope: 'col' }, 'How the last turn ended'), h('th', { scope: 'col' }, 'Logs'))),
      h('tbody', null, runRows.map((r, i) => h('tr', { testid: 'attempt-row' },
        h('td', null, String(i + 1)), h('td', null, h('code', { class: 'small' }, r.instanceId)), h('td', null, fmtTime(r.first)), h('td', null, fmtTime(r.last)),
        h('td', null, String(r.turns)), h('td', { title: r.stopReason || undefined }, r.stopReason ? stopWords(r.stopReason) : '—'),
        h('td', null, h('button', { type: 'button', class: 'btn btn-small', onclick: () => { select('logs'); loadLogs(r.instanceId); } }, 'Logs'))))));
    let events = [];
    try { events = await api.taskEvents(taskId); } catch { /* shown as empty */ }
    if (!alive) return;
    const evTable = h('table', { class: 'table', testid: 'task-events' },
      h('caption', null, 'Task changes'),
      h('thead', null, h('tr', null, h('th', { scope: 'col' }, 'When'), h('th', { scope: 'col' }, 'What'), h('th', { scope: 'col' }, 'Who'), h('th', { scope: 'col' }, 'Details'))),
      h('tbody', null, events.map((e) => h('tr', { testid: 'task-event-row' },
        h('td', null, fmtTime(e.created_at || e.occurred_at || e.at)),
        h('td', null, CHANGE_WORDS[e.kind] || String(e.kind || '')),
        h('td', null, String(e.actor || '')),
        h('td', null, describeChange(e))))));
    clear(historyBox).append(runRows.length ? labelCells(runsTable) : h('p', { class: 'muted' }, 'No agent runs seen yet.'), labelCells(evTable));
  }

  function kv(k, v) { return [h('dt', null, k), h('dd', null, v)]; }

  // ---- debug hooks for tests ----
  // (defineProperties, not Object.assign: the getters must stay live)
  Object.defineProperties(debug, Object.getOwnPropertyDescriptors({
    closeSocket: () => socket.drop(),
    get reconnects() { return socket.reconnects; },
    get socketStatus() { return socket.status; },
    get lastSeq() { return feed.lastSeq; },
    get duplicatesIgnored() { return feed.duplicatesIgnored; },
    get feedItems() { return feed.items.length; },
    get eventsApplied() { return feed.applied; },
    // The compacted feed's pages: more before the loaded ones, one loading.
    get olderPages() { return !!(feed.pager && feed.pager.hasMore); },
    get loadingPage() { return !!(feed.pager && feed.pager.loading); },
    feed,
  }));

  refresh();
  const onVis = () => { if (!document.hidden) refresh(); };
  document.addEventListener('visibilitychange', onVis);

  function cleanup() {
    alive = false;
    clearTimeout(statusTimer);
    clearTimeout(refreshTimer);
    socket.close();
    document.removeEventListener('visibilitychange', onVis);
  }
  return cleanup;
}
