// Small DOM helpers. Text always goes through textContent; the only
// innerHTML writes in the app are the markdown renderer's escaped output.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'text') el.textContent = v;
      else if (k === 'testid') el.dataset.testid = v;
      else if (k === 'dataset') Object.assign(el.dataset, v);
      else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else if (v === true) el.setAttribute(k, '');
      else el.setAttribute(k, String(v));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

export function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); return el; }

export function toast(message, kind = 'info', ms = 6000) {
  const box = document.getElementById('toasts');
  if (!box) return;
  const t = h('div', { class: `toast toast-${kind}`, testid: `toast-${kind}`, role: kind === 'error' ? 'alert' : undefined }, message);
  t.addEventListener('click', () => t.remove()); // out of the way at once
  box.appendChild(t);
  setTimeout(() => t.remove(), ms);
}

// A modal <dialog> that resolves with the submitted form's values or null.
// `actions` adds submit buttons before the main one ({label, value, testid});
// the clicked one's value comes back as `_action` (the main one: 'submit').
// `onSubmit(values)` may check or send the values first: what it returns
// (or an error it throws) keeps the dialog open with everything typed. A
// string is shown above the buttons; `{ field, message }` is shown next to
// the form field named `field`, which gets the focus.
export function dialog({ title, body, submitLabel = 'Save', danger = false, testid = 'dialog', onOpen, actions = [], onSubmit, wide = false }) {
  return new Promise((resolve) => {
    const form = h('form', { method: 'dialog', class: 'dialog-form', novalidate: onSubmit ? true : undefined });
    const err = h('p', { class: 'form-error', role: 'alert', testid: `${testid}-error`, hidden: true });
    const cancel = h('button', { type: 'button', class: 'btn', value: 'cancel', testid: `${testid}-cancel` }, 'Cancel');
    const extra = actions.map((a) => h('button', { type: 'submit', class: 'btn', value: a.value, testid: a.testid, title: a.title }, a.label));
    const submit = h('button', { type: 'submit', class: danger ? 'btn btn-danger' : 'btn btn-primary', value: 'submit', testid: `${testid}-submit` }, submitLabel);
    form.append(h('h2', { class: 'dialog-title', id: `${testid}-title` }, title), body, err, h('div', { class: 'dialog-actions' }, cancel, extra, submit));
    const dlg = h('dialog', { class: `dialog${wide ? ' dialog-wide' : ''}`, testid, 'aria-labelledby': `${testid}-title` }, form);
    document.body.appendChild(dlg);
    let done = false;
    const finish = (v) => { if (done) return; done = true; dlg.close(); dlg.remove(); resolve(v); };
    const setError = (problem) => showProblem(form, err, problem);
    cancel.addEventListener('click', () => finish(null));
    dlg.addEventListener('cancel', (e) => { e.preventDefault(); finish(null); });
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const values = Object.fromEntries(new FormData(form).entries());
      values._action = (e.submitter && e.submitter.value) || 'submit';
      if (!onSubmit) { finish(values); return; }
      const buttons = [submit, ...extra];
      buttons.forEach((b) => { b.disabled = true; });
      setError(null);
      let problem;
      try { problem = await onSubmit(values, form); } catch (ex) { problem = ex && ex.message ? ex.message : String(ex); }
      buttons.forEach((b) => { b.disabled = false; });
      if (problem) setError(problem);
      else finish(values);
    });
    dlg.setError = setError;
    dlg.showModal();
    if (onOpen) onOpen(dlg);
    else { const first = form.querySelector('input,textarea,select'); (first || submit).focus(); }
  });
}

/**
 * Shows a dialog's problem: a string in `err`, `{field, message}` next to
 * that field (cleared once the field is edited); null clears them all.
 */
function showProblem(form, err, problem) {
  for (const old of form.querySelectorAll('.field-error')) old.remove();
  for (const bad of form.querySelectorAll('[aria-invalid=true]')) bad.removeAttribute('aria-invalid');
  const input = problem && typeof problem === 'object' ? form.elements[problem.field] : null;
  const text = problem && typeof problem === 'object' ? problem.message : problem;
  err.textContent = input ? '' : text || '';
  err.hidden = !!input || !text;
  if (!input) { if (text) err.scrollIntoView({ block: 'nearest' }); return; }
  const note = h('p', { class: 'form-error field-error', role: 'alert', id: `${input.id}-error`, testid: `${input.name}-error` }, text);
  input.after(note);
  input.setAttribute('aria-invalid', 'true');
  input.setAttribute('aria-describedby', note.id);
  input.addEventListener('input', () => { note.remove(); input.removeAttribute('aria-invalid'); }, { once: true });
  input.focus();
}

export function confirmDialog(title, message, label = 'Delete') {
  return dialog({ title, body: h('p', null, message), submitLabel: label, danger: true, testid: 'confirm' })
    .then((v) => v !== null);
}

export function field(label, input, hint) {
  const id = input.id || (input.id = `f-${Math.random().toString(36).slice(2, 9)}`);
  return h('div', { class: 'field' }, h('label', { for: id }, label), input, hint ? h('small', { class: 'hint' }, hint) : null);
}

/**
 * Lets a table's rows stack as "label: value" lines on a phone
 * (styles.css, .table-stack): each body cell gets its column's heading as
 * data-label. Call it again after refilling the body.
 */
export function labelCells(table) {
  table.classList.add('table-stack');
  const heads = [...table.querySelectorAll('thead th')].map((th) => th.textContent.trim());
  for (const body of table.tBodies) {
    for (const row of body.rows) [...row.cells].forEach((td, i) => { td.dataset.label = td.colSpan > 1 ? '' : heads[i] || ''; });
  }
  return table;
}

export function fmtTime(ts) {
  if (!ts) return '';
  const d = new Date(ts);
  if (Number.isNaN(d.getTime())) return String(ts);
  return d.toLocaleString();
}

// Formatters are built once: a long feed stamps thousands of items.
const CLOCK = new Intl.DateTimeFormat(undefined, { timeStyle: 'medium' });
const DAY_CLOCK = new Intl.DateTimeFormat(undefined, { dateStyle: 'short', timeStyle: 'medium' });
const FULL = new Intl.DateTimeFormat(undefined, { dateStyle: 'full', timeStyle: 'long' });

/** A <time> with the local clock time, the full date as its tooltip. */
export function timeEl(ts, testid) {
  const d = new Date(ts);
  if (!ts || Number.isNaN(d.getTime())) return null;
  const today = new Date();
  const sameDay = d.getFullYear() === today.getFullYear() && d.getMonth() === today.getMonth() && d.getDate() === today.getDate();
  return h('time', { class: 'ts', datetime: d.toISOString(), title: FULL.format(d), testid }, (sameDay ? CLOCK : DAY_CLOCK).format(d));
}
