// The inbox's only script (no inline script anywhere: CSP `default-src 'self'`).
// - the pending list refreshes itself when approvals change (server-sent events);
// - j / k move between rows, Enter opens one;
// - "time left" counts down;
// - the edit form previews the decision and the diff of the edited arguments;
// - a refusal shown in answer to a form takes the page's own address (no resubmit on reload).
// Everything inserted comes from the inbox's own server-rendered, escaped HTML.
'use strict';

function timeLeft(expires) {
  const s = Math.floor((expires - Date.now()) / 1000);
  if (s <= 0) return 'expired';
  if (s < 60) return `${s} s left`;
  if (s < 3600) return `${Math.floor(s / 60)} min left`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min left`;
}

function tick() {
  for (const el of document.querySelectorAll('[data-expires]')) {
    el.textContent = timeLeft(Number(el.dataset.expires));
  }
}

async function refreshPending(box) {
  const r = await fetch('/inbox/pending' + window.location.search, { credentials: 'same-origin' });
  if (!r.ok) return;
  const count = r.headers.get('x-pending-count');
  box.innerHTML = await r.text();
  if (count !== null) document.title = document.title.replace(/^\(\d+\)/, `(${count})`);
}

function keyboard() {
  let at = -1;
  document.addEventListener('keydown', (e) => {
    if (e.target.closest('input, textarea, select')) return;
    const rows = [...document.querySelectorAll('a.row')];
    if (!rows.length) return;
    if (e.key === 'j') at = Math.min(at + 1, rows.length - 1);
    else if (e.key === 'k') at = Math.max(at - 1, 0);
    else return;
    rows[at].focus();
  });
}

function preview() {
  const form = document.getElementById('edit-form');
  const button = document.getElementById('preview-button');
  const out = document.getElementById('preview');
  if (!form || !button || !out) return;
  button.addEventListener('click', async () => {
    const body = new URLSearchParams(new FormData(form));
    const r = await fetch(form.dataset.preview, { method: 'POST', body, credentials: 'same-origin' });
    out.innerHTML = await r.text();
  });
}

document.addEventListener('DOMContentLoaded', () => {
  tick();
  setInterval(tick, 1000);
  keyboard();
  preview();
  const box = document.getElementById('pending');
  if (box) {
    const events = new EventSource('/inbox/events');
    events.addEventListener('changed', () => refreshPending(box));
    events.addEventListener('open', () => refreshPending(box));
  }
});

// A refused form answer is shown at the form's POST address; a reload there would send the
// answer again. The page names its own address, and the history entry takes it.
(function () {
  const el = document.querySelector('[data-canonical]');
  if (el && window.history.replaceState) window.history.replaceState(null, '', el.dataset.canonical);
})();
