// The task stream: a WebSocket that reconnects by itself with backoff
// (livesocket.js) and resumes with ?after=<last seq>; commands go over it
// and are answered with `ack` or `error` frames.

import { API } from './api.js';
import { LiveSocket } from './livesocket.js';

export class TaskSocket extends LiveSocket {
  constructor(taskId, { lastSeq, onFrame, onControl, onStatus }) {
    super(onStatus);
    this.taskId = taskId;
    this.lastSeq = lastSeq;       // () => number
    this.onFrame = onFrame;
    this.onControl = onControl || (() => {});
    this.pending = new Map();  // sent, waiting for their answer
    this.unsent = new Map();   // waiting for the socket to open
    this.seqNo = 0;
  }

  url() {
    return LiveSocket.wsUrl(`${API}/orchestrator/tasks/${encodeURIComponent(this.taskId)}/stream?after=${this.lastSeq()}`);
  }

  reconnecting() { return this.reconnects > 0 || this.attempt > 0; }

  received(f) {
    if (f.seq != null && f.event) { this.onFrame(f); return; }
    const waiter = f.id != null && this.pending.get(String(f.id));
    if (waiter) {
      this.pending.delete(String(f.id));
      clearTimeout(waiter.timer);
      if (f.type === 'error') waiter.reject(Object.assign(new Error(f.message || f.error || 'command failed'), { frame: f }));
      else waiter.resolve(f);
      return;
    }
    this.onControl(f);
    // the server dropped us behind: resume from what we have
    if (f.type === 'lagging' || f.type === 'resync') this.reconnectNow();
  }

  lost(e) {
    this.failPending('connection lost');
    if (e.code === 1008 && /^lagging/i.test(e.reason || '')) {
      // too slow for the live stream: resume at once from our last seq
      this.onControl({ type: 'lagging', message: e.reason });
      this.attempt = 0;
    } else if (e.code === 4401 || e.code === 1008) this.onControl({ type: 'error', message: e.reason || 'unauthorized' });
  }

  reconnectNow() {
    if (this.ws) { const ws = this.ws; this.ws = null; try { ws.close(4000, 'resync'); } catch { /* ignore */ } }
    this.scheduleReconnect();
  }

  send(obj) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify(obj));
    return true;
  }

  /** Sends a command (once the socket is open, if it is still connecting)
   *  and resolves with its `ack` (rejects on `error`, or when no answer
   *  comes within `timeoutMs`). */
  command(obj, timeoutMs = 20_000) {
    const msg = { ...obj, id: `c${++this.seqNo}` };
    return new Promise((resolve, reject) => {
      const waiter = { msg, resolve, reject };
      waiter.timer = setTimeout(() => {
        const sent = this.pending.delete(msg.id);
        this.unsent.delete(msg.id);
        reject(new Error(sent ? 'no answer from the server' : 'not connected'));
      }, timeoutMs);
      this.dispatch(waiter);
    });
  }

  /** Sends a command now, or keeps it until the socket opens; a command
   *  is sent at most once. */
  dispatch(waiter) {
    if (this.send(waiter.msg)) this.pending.set(waiter.msg.id, waiter);
    else this.unsent.set(waiter.msg.id, waiter);
  }

  setStatus(s) {
    super.setStatus(s);
    if (s !== 'open') return;
    const waiting = [...this.unsent.values()];
    this.unsent.clear();
    waiting.forEach((w) => this.dispatch(w));
  }

  /** Rejects the commands sent (a lost connection may have lost them);
   *  with `unsent`, those still waiting to be sent too. */
  failPending(msg, unsent = false) {
    const waiters = [...this.pending.values(), ...(unsent ? this.unsent.values() : [])];
    for (const w of waiters) { clearTimeout(w.timer); w.reject(new Error(msg)); }
    this.pending.clear();
    if (unsent) this.unsent.clear();
  }

  get isOpen() { return !!this.ws && this.ws.readyState === WebSocket.OPEN; }

  close() {
    this.failPending('closed', true);
    super.close();
  }
}
