// The task page's Logs tab: the last lines of an agent instance's logs
// (GET /instances/{id}/logs), else the log lines seen in the feed; new
// lines from the feed are appended while the tab shows.

import { h, clear } from './dom.js';
import { api, asList } from './api.js';

/** The Logs panel of `model` (taskstate.js). */
export function logsPanel(model) {
  const pre = h('pre', { class: 'logs', testid: 'logs', tabindex: '0', 'aria-label': 'Agent logs' });
  const info = h('p', { class: 'muted small', testid: 'logs-info' });
  const el = h('div', { class: 'panel', id: 'panel-logs', role: 'tabpanel', 'aria-labelledby': 'tab-logs', hidden: true },
    h('div', { class: 'row' }, info, h('button', { type: 'button', class: 'btn btn-small', testid: 'logs-refresh', onclick: () => load() }, 'Refresh')), pre);

  function append(line) {
    const atBottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 40;
    pre.append(`${line}\n`);
    if (pre.childNodes.length > 6000) for (let i = 0; i < 1000; i++) pre.firstChild.remove();
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  }

  /** Shows the logs of `instanceId` (default: the execution's instance). */
  async function load(instanceId) {
    const iid = instanceId || model.status?.instance_id;
    clear(pre);
    if (!iid) {
      info.textContent = model.liveLogs.length ? 'Live log lines from the feed:' : 'No agent instance yet.';
      model.liveLogs.forEach(append);
      return;
    }
    info.textContent = `Instance ${iid} — last 500 lines`;
    try {
      const data = await api.logs(iid, 500);
      // {lines: [{timestamp, stream, line}]}, as the gateway documents it.
      const lines = asList(data, 'lines').map((l) => `${l.stream !== 'stderr' ? `[${l.stream}] ` : ''}${l.line}`);
      lines.forEach(append);
      if (!lines.length) info.textContent += ' (empty)';
    } catch (e) {
      info.textContent = `Could not load logs: ${e.message}. Live lines from the feed:`;
      model.liveLogs.forEach(append);
    }
  }

  /** A log line from the feed: shown at once while the tab is. */
  function live(line) { if (!el.hidden) append(line); }

  return { el, load, live };
}
