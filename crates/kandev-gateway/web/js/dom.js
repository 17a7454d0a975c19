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
  box.appendChild(t);
  setTimeout(() => t.remove(), ms);
}

// A modal <dialog> that resolves with the submitted form's values or null.
export function dialog({ title, body, submitLabel = 'Save', danger = false, testid = 'dialog', onOpen }) {
  return new Promise((resolve) => {
    const form = h('form', { method: 'dialog', class: 'dialog-form' });
    const err = h('p', { class: 'form-error', role: 'alert', testid: `${testid}-error`, hidden: true });
    const cancel = h('button', { type: 'button', class: 'btn', value: 'cancel', testid: `${testid}-cancel` }, 'Cancel');
    const submit = h('button', { type: 'submit', class: danger ? 'btn btn-danger' : 'btn btn-primary', testid: `${testid}-submit` }, submitLabel);
    form.append(h('h2', { class: 'dialog-title', id: `${testid}-title` }, title), body, err, h('div', { class: 'dialog-actions' }, cancel, submit));
    const dlg = h('dialog', { class: 'dialog', testid, 'aria-labelledby': `${testid}-title` }, form);
    document.body.appendChild(dlg);
    let done = false;
    const finish = (v) => { if (done) return; done = true; dlg.close(); dlg.remove(); resolve(v); };
    cancel.addEventListener('click', () => finish(null));
    dlg.addEventListener('cancel', (e) => { e.preventDefault(); finish(null); });
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const values = Object.fromEntries(new FormData(form).entries());
      finish(values);
    });
    dlg.showModal();
    if (onOpen) onOpen(dlg);
    else { const first = form.querySelector('input,textarea,select'); (first || submit).focus(); }
    dlg.setError = (m) => { err.textContent = m; err.hidden = !m; };
  });
}

export function confirmDialog(title, message, label = 'Delete') {
  return dialog({ title, body: h('p', null, message), submitLabel: label, danger: true, testid: 'confirm' })
    .then((v) => v !== null);
}

export function field(label, input, hint) {
  const id = input.id || (input.id = `f-${Math.random().toString(36).slice(2, 9)}`);
  return h('div', { class: 'field' }, h('label', { for: id }, label), input, hint ? h('small', { class: 'hint' }, hint) : null);
}

export function fmtTime(ts) {
  if (!ts) return '';
  const d = new Date(ts);
  if (Number.isNaN(d.getTime())) return String(ts);
  return d.toLocaleString();
}
