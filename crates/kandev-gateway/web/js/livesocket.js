// A live stream's WebSocket: it reconnects by itself with backoff, and
// the token travels as a subprotocol: ["kandev.bearer", token]. The task's
// stream (socket.js) and the board's (boardsocket.js) extend it with where
// they connect (`url()`), what a message means (`received(msg)`) and,
// optionally, what a lost connection means (`lost(closeEvent)`).

import { auth } from './api.js';

export class LiveSocket {
  constructor(onStatus) {
    this.onStatus = onStatus || (() => {});
    this.ws = null;
    this.closed = false;
    this.attempt = 0;       // failed tries since the last open
    this.connections = 0;   // connections opened
    this.reconnects = 0;    // tries after the first
    this.timer = null;
    this.status = 'idle';
  }

  static wsUrl(path) {
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    return `${proto}//${location.host}${path}`;
  }

  setStatus(s) { this.status = s; this.onStatus(s, this); }

  open() {
    if (this.closed) return;
    clearTimeout(this.timer);
    const token = auth.token;
    let ws;
    try {
      ws = new WebSocket(this.url(), token ? ['kandev.bearer', token] : undefined);
    } catch {
      this.scheduleReconnect();
      return;
    }
    this.ws = ws;
    this.setStatus(this.reconnecting() ? 'reconnecting' : 'connecting');
    ws.onopen = () => {
      if (this.ws !== ws) return;
      this.attempt = 0;
      this.connections++;
      this.setStatus('open');
    };
    ws.onmessage = (m) => {
      if (this.ws !== ws) return;
      let msg;
      try { msg = JSON.parse(m.data); } catch { return; }
      if (msg) this.received(msg);
    };
    ws.onclose = (e) => {
      if (this.ws !== ws) return;
      this.ws = null;
      if (this.closed) { this.setStatus('closed'); return; }
      this.lost(e);
      this.scheduleReconnect();
    };
    ws.onerror = () => {}; // onclose follows
  }

  /** Whether a new connection counts as a reconnect. */
  reconnecting() { return this.connections > 0; }

  /** The connection was lost (not closed by us); a reconnect follows. */
  lost() {}

  scheduleReconnect() {
    if (this.closed) return;
    this.setStatus('reconnecting');
    const base = Math.min(10_000, 300 * 2 ** this.attempt);
    const delay = base / 2 + Math.random() * base / 2;
    this.attempt++;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => { this.reconnects++; this.open(); }, delay);
  }

  /** Cut the socket as a network failure would (tests use this). */
  drop() {
    if (this.ws) { try { this.ws.close(4000, 'debug drop'); } catch { /* ignore */ } }
  }

  close() {
    this.closed = true;
    clearTimeout(this.timer);
    if (this.ws) { const ws = this.ws; this.ws = null; try { ws.close(1000, 'leaving'); } catch { /* ignore */ } }
    this.setStatus('closed');
  }
}
