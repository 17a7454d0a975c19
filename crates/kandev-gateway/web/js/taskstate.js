// What the task page knows of its task: the task, its execution status,
// the follow-ups held for the turn's end, whether a turn runs, the agent
// runs seen in the feed, the live log lines. No DOM: the page's parts
// (task.js) draw it.

import { api, taskState } from './api.js';
import { pendingPrompts } from './followups.js';
import { STATE, EXEC, execState, ACTIVE_EXEC, BUSY_EXEC } from './common.js';

/** Live log lines kept for the Logs tab. */
const LIVE_LOG_LINES = 5000;

/** A log event's line, as the Logs tab shows it. */
export function logLine(d) { return `${d.level ? `[${d.level}] ` : ''}${d.line}`; }

export class TaskModel {
  constructor(taskId) {
    this.taskId = taskId;
    this.alive = true;
    this.task = null;
    this.status = null;       // the execution (null: never ran)
    this.pending = [];        // follow-ups held until the turn ends
    this.turnActive = false;  // a turn runs (from the feed)
    this.busy = false;        // a start/stop request is in flight
    this.usage = null;        // the agent's last usage report
    this.boardName = null;
    this.runs = new Map();    // instance_id -> {instanceId, first, last, turns, stopReason, seqFrom, seqTo}
    this.liveLogs = [];
  }

  /** Reads the task, its execution (none: 404) and its held follow-ups. */
  async load() {
    const [t, s, held] = await Promise.all([
      api.task(this.taskId),
      api.status(this.taskId).catch((e) => (e.status === 404 ? null : Promise.reject(e))),
      pendingPrompts(this.taskId).catch(() => this.pending)]);
    if (!this.alive) return;
    this.task = t;
    this.status = s;
    this.pending = held;
  }

  get state() { return taskState(this.task); }
  get exec() { return execState(this.status); }
  /** An agent at work or about to be. */
  get active() { return ACTIVE_EXEC.has(this.exec); }
  get running() { return this.exec === EXEC.RUNNING; }
  /** A run busy with a turn holds a follow-up until the turn ends. */
  get holds() { return BUSY_EXEC.has(this.exec); }
  /** A run still queued (or waiting to retry) takes a follow-up once it runs. */
  get waiting() { return this.active && !this.holds; }
  get terminal() { return !!this.task && [STATE.COMPLETED, STATE.CANCELLED].includes(this.state); }
  /** A failed run about to be tried again, with what went wrong so far. */
  get retrying() { return this.exec === EXEC.RETRY_WAIT && !!this.status?.last_error; }

  /** Takes a feed event in: the run it belongs to, the turn, usage, log lines. */
  note(ev, frame) {
    const d = ev.data || {};
    const run = this.runOf(ev, frame);
    switch (ev.kind) {
      case 'turn_end': this.turnActive = false; run.turns++; run.stopReason = d.stop_reason; break;
      case 'lifecycle':
        if (d.phase === 'turn_started') this.turnActive = true;
        if (d.phase === 'closed') this.turnActive = false;
        break;
      case 'other': if (ev.direction === 'to_agent' && d.method === 'session/prompt') this.turnActive = true; break;
      case 'usage': this.usage = d; break;
      case 'log':
        this.liveLogs.push(logLine(d));
        if (this.liveLogs.length > LIVE_LOG_LINES) this.liveLogs.splice(0, this.liveLogs.length - LIVE_LOG_LINES);
        break;
      default: break;
    }
  }

  runOf(ev, frame) {
    const iid = frame.instance_id || 'unknown';
    let run = this.runs.get(iid);
    if (!run) {
      run = { instanceId: iid, first: ev.timestamp, last: ev.timestamp, turns: 0, stopReason: null, seqFrom: frame.seq, seqTo: frame.seq };
      this.runs.set(iid, run);
    }
    run.last = ev.timestamp;
    run.seqTo = frame.seq;
    return run;
  }

  /** The runs with a known instance, in the order seen. */
  knownRuns() { return [...this.runs.values()].filter((r) => r.instanceId !== 'unknown'); }
}
