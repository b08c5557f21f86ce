// Requests: every Web Services request, newest first, live: its authentication decision, status,
// time and bodies. Pause, clear, and filters by status, operation, user and free text.
import { api, h, poll, time, pretty, keyboardRows } from './api.js';

const limit = 500;

export function requests(main, params) {
  let entries = [];
  let selected = null;
  const filter = {
    status: h('select', { id: 'filter-status' }, ['all', '2xx', '4xx', '5xx', 'refused'].map((s) => h('option', {}, s))),
    operation: h('input', { id: 'filter-operation', size: 16, placeholder: 'records/modify', value: params.get('operation') || '' }),
    user: h('input', { id: 'filter-user', size: 10, placeholder: '_alice', value: params.get('user') || '' }),
    text: h('input', { id: 'filter-text', size: 22, placeholder: 'in paths and bodies  (/)', 'data-focus': true }),
  };
  const paused = h('input', { type: 'checkbox', id: 'pause' });
  const count = h('span', { class: 'muted' });
  const tbody = h('tbody', { id: 'request-rows' });
  keyboardRows(tbody);
  const request = h('pre', { id: 'request-body' });
  const response = h('pre', { id: 'response-body' });
  const facts = h('div', { id: 'request-facts', class: 'muted' }, 'Select a request to see its bodies.');
  main.append(
    h('div', { class: 'bar' },
      h('label', {}, 'status', filter.status), h('label', {}, 'operation', filter.operation), h('label', {}, 'user', filter.user),
      h('label', {}, 'text', filter.text),
      h('label', { class: 'inline', title: 'p' }, paused, 'Pause'),
      h('button', { type: 'button', onclick: clear }, 'Clear'), count),
    h('div', { class: 'scroll half' }, h('table', {},
      h('colgroup', {}, [55, 105, 72, 170, 55, 90, null, 60, 45].map((w) => h('col', { style: w ? `width:${w}px` : '' }))),
      h('thead', {}, h('tr', {}, ['#', 'time', 'method', 'operation', 'status', 'user', 'authentication', 'ms', 'push'].map((n) => h('th', {}, n)))),
      tbody)),
    facts,
    h('div', { class: 'details' }, h('div', {}, h('h3', {}, 'Request'), request), h('div', {}, h('h3', {}, 'Response'), response)));
  for (const control of Object.values(filter)) control.addEventListener('input', render);
  const onKey = (event) => {
    if (event.key === 'p' && !['INPUT', 'TEXTAREA', 'SELECT'].includes(document.activeElement.tagName)) paused.click();
  };
  document.addEventListener('keydown', onKey);

  const stop = poll('requests', (fresh) => {
    entries = fresh.concat(entries).slice(0, limit);
    render();
  }, () => !paused.checked);

  function matches(entry) {
    const status = filter.status.value;
    if (status === 'refused' && !(entry.authentication || '').startsWith('refused')) return false;
    if (/^\dxx$/.test(status) && String(entry.status)[0] !== status[0]) return false;
    if (filter.operation.value && !entry.operation.includes(filter.operation.value.trim())) return false;
    if (filter.user.value && entry.user !== filter.user.value.trim()) return false;
    const text = filter.text.value.trim().toLowerCase();
    if (text && ![entry.path, entry.requestBody, entry.responseBody, entry.authentication || ''].some((t) => t.toLowerCase().includes(text))) return false;
    return true;
  }

  function render() {
    const shown = entries.filter(matches);
    count.textContent = `${shown.length} of ${entries.length}`;
    tbody.replaceChildren(...shown.map((entry) => {
      const row = h('tr', { tabindex: 0, class: entry.number === selected?.number ? 'selected' : null, 'data-number': entry.number,
        onclick: () => { selected = entry; for (const r of tbody.querySelectorAll('.selected')) r.classList.remove('selected'); row.classList.add('selected'); detail(entry); } },
        h('td', {}, entry.number), h('td', {}, time(entry.time)), h('td', {}, entry.method),
        h('td', { class: 'code', title: entry.path }, entry.operation),
        h('td', { class: `s${String(entry.status)[0]}` }, entry.status), h('td', {}, entry.user || '—'),
        h('td', { title: entry.authentication || '' }, entry.authentication || '—'), h('td', {}, entry.milliseconds), h('td', {}, entry.pushes || ''));
      return row;
    }));
  }

  function detail(entry) {
    facts.replaceChildren(`${entry.method} ${entry.path} · ${entry.status} · ${entry.authentication || 'no credentials read'}`,
      entry.changes.length ? h('span', {}, ' · changes: ', entry.changes.map((n) => [h('a', { href: `/console/subscriptions?change=${n}`, class: 'explain-link' }, `#${n} explain`), ' '])) : '');
    request.textContent = pretty(entry.requestBody);
    response.textContent = pretty(entry.responseBody);
  }

  async function clear() {
    await api('requests/clear', {});
    entries = [];
    render();
  }

  return () => { stop(); document.removeEventListener('keydown', onKey); };
}
