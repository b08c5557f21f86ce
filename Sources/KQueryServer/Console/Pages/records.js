// Records: a query in KQuery's predicate language over any container, environment, database,
// user and zone, typed or built with filters; the result's records; a record's JSON, edited and
// saved through records/modify.
import { api, webServices, h, setStatus, keyboardRows, count } from './api.js';
import { operators, predicate } from './filters.js';

const fields = ['container', 'environment', 'database', 'user', 'zone', 'type', 'q', 'sort'];

export function records(main, params) {
  const context = Object.fromEntries(fields.map((name) => [name, params.get(name) || '']));
  context.environment ||= 'development';
  context.database ||= 'public';
  let markers = [];
  let selected = null;

  const input = (name, attributes = {}) => h('input', { name, value: context[name], ...attributes });
  const form = h('form', { class: 'bar', id: 'query-form' },
    h('label', {}, 'container', input('container', { list: 'containers', size: 20, required: true })),
    h('label', {}, 'environment', h('select', { name: 'environment' },
      ['development', 'production'].map((e) => h('option', { selected: e === context.environment }, e)))),
    h('label', {}, 'database', h('select', { name: 'database' },
      ['public', 'private', 'shared'].map((d) => h('option', { selected: d === context.database }, d)))),
    h('label', {}, 'act as user', input('user', { list: 'users', size: 10, placeholder: '(none)' })),
    h('label', {}, 'zone', input('zone', { size: 10, placeholder: '_defaultZone' })),
    h('label', {}, 'record type', input('type', { size: 10, required: true })),
    h('label', { class: 'grow' }, 'predicate', input('q', { class: 'code', 'data-focus': true, placeholder: 'TRUEPREDICATE  (press / to come here)', spellcheck: 'false', autocomplete: 'off' })),
    h('label', {}, 'sort', input('sort', { size: 10, placeholder: 'field[:desc]' })),
    h('button', { class: 'primary', type: 'submit', title: 'Enter' }, 'Run'),
    h('button', { type: 'button', onclick: () => edit(null) }, 'New record'),
    h('datalist', { id: 'containers' }), h('datalist', { id: 'users' }));
  const error = h('pre', { class: 'error', id: 'predicate-error' });
  // Filters write the predicate box; "Apply" runs it.
  const filterRows = h('div', { id: 'filter-rows' });
  const filterError = h('pre', { class: 'error', id: 'filter-error' });
  const filters = h('details', { id: 'filters' },
    h('summary', {}, 'Build the predicate with filters'),
    filterRows,
    h('div', { class: 'actions' },
      h('button', { type: 'button', id: 'add-filter', onclick: () => addFilter() }, '+ Filter'),
      h('button', { type: 'button', class: 'primary', id: 'apply-filters', onclick: applyFilters }, 'Apply')),
    filterError, h('datalist', { id: 'fields-seen' }));
  function addFilter() {
    const row = h('div', { class: 'bar filter' },
      h('input', { name: 'field', list: 'fields-seen', size: 14, placeholder: 'field', 'aria-label': 'field' }),
      h('select', { name: 'operator', 'aria-label': 'operator' }, operators.map((o, i) => h('option', { value: i }, o.label))),
      h('input', { name: 'value', size: 24, placeholder: 'value', 'aria-label': 'value', class: 'code' }),
      h('select', { name: 'kind', 'aria-label': 'value type' }, ['auto', 'text', 'number', 'date'].map((k) => h('option', { value: k }, k))),
      h('button', { type: 'button', title: 'remove', onclick: () => row.remove() }, '×'));
    filterRows.append(row);
    row.querySelector('input').focus();
  }
  function applyFilters() {
    filterError.textContent = '';
    try {
      const rows = [...filterRows.querySelectorAll('.filter')].map((r) => ({
        field: r.querySelector('[name=field]').value, operator: Number(r.querySelector('[name=operator]').value),
        value: r.querySelector('[name=value]').value, kind: r.querySelector('[name=kind]').value,
      }));
      form.elements.q.value = predicate(rows);
      form.requestSubmit();
    } catch (e) { filterError.textContent = e.message; }
  }
  const table = h('table', { id: 'records' });
  const pager = h('div', { class: 'actions' });
  const detail = h('div', { class: 'panel', id: 'record-panel' }, h('div', { class: 'empty' }, 'Select a record to see its JSON.'));
  main.append(form, filters, error, h('div', { class: 'split' }, h('div', {}, h('div', { class: 'scroll' }, table), pager), detail));

  api('overview').then((overview) => {
    document.getElementById('containers').replaceChildren(...overview.containers.map((c) => h('option', { value: c })));
    document.getElementById('users').replaceChildren(...overview.users.map((u) => h('option', { value: u })));
    if (!context.container && overview.containers.length) form.elements.container.value = overview.containers[0];
  }).catch((e) => setStatus(e.message));

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    for (const name of fields) context[name] = form.elements[name].value.trim();
    const query = new URLSearchParams(Object.entries(context).filter(([, v]) => v));
    history.replaceState(null, '', `/console/records?${query}`);
    markers = [];
    if (await check()) run(null);
  });

  // The predicate is checked as it is typed: the caret shows before the query runs.
  let typing;
  form.elements.q.addEventListener('input', () => {
    clearTimeout(typing);
    typing = setTimeout(check, 300);
  });
  async function check() {
    try {
      const verdict = await api('check', { q: form.elements.q.value.trim() });
      error.textContent = verdict.valid ? '' : verdict.error;
      if (!verdict.valid) { table.replaceChildren(); pager.replaceChildren(); setStatus('invalid predicate'); }
      return verdict.valid;
    } catch (e) {
      error.textContent = e.message;
      return false;
    }
  }

  async function run(marker) {
    error.textContent = '';
    try {
      const started = performance.now();
      const body = { ...context, limit: 50 };
      if (marker) body.continuationMarker = marker;
      const answer = await api('query', body);
      show(answer.records || []);
      setStatus(`${count(answer.records.length, 'record')} in ${Math.round(performance.now() - started)} ms`);
      pager.replaceChildren(...[
        markers.length ? h('button', { type: 'button', onclick: () => { markers.pop(); run(markers.at(-1) || null); } }, '← Previous') : null,
        answer.continuationMarker ? h('button', { type: 'button', id: 'next-page', onclick: () => { markers.push(answer.continuationMarker); run(answer.continuationMarker); } }, 'Next page →') : null].filter(Boolean));
    } catch (e) {
      error.textContent = e.message;
      table.replaceChildren();
      pager.replaceChildren();
      setStatus(e.status ? `${e.status} ${e.body?.serverErrorCode || ''}` : e.message);
    }
  }

  function show(list) {
    const all = [...new Set(list.flatMap((r) => Object.keys(r.fields || {})))];
    document.getElementById('fields-seen').replaceChildren(...all.map((n) => h('option', { value: n })));
    const names = all.slice(0, 7);
    const head = h('tr', {}, h('th', {}, 'recordName'), names.map((n) => h('th', {}, n)), h('th', {}, 'modified'));
    const rows = list.map((record) => {
      const row = h('tr', { tabindex: 0, onclick: () => { select(row, record); } },
        h('td', { class: 'code' }, record.recordName),
        names.map((n) => h('td', { title: value(record.fields?.[n]) }, value(record.fields?.[n]))),
        h('td', {}, record.modified ? new Date(record.modified.timestamp).toLocaleString() : ''));
      return row;
    });
    const tbody = h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { class: 'empty', colspan: names.length + 2 }, 'No records.')));
    keyboardRows(tbody);
    table.replaceChildren(h('thead', {}, head), tbody);
  }

  function value(field) {
    if (!field) return '';
    const v = field.value;
    if (field.type === 'TIMESTAMP') return new Date(v).toISOString();
    if (field.type === 'ASSETID' && v && typeof v === 'object') return `asset, ${v.size} bytes`;
    if (v && typeof v === 'object') return JSON.stringify(v);
    return String(v);
  }

  function select(row, record) {
    for (const r of table.querySelectorAll('tr.selected')) r.classList.remove('selected');
    row.classList.add('selected');
    edit(record);
  }

  // The record's JSON, editable: saving sends records/modify as the acting user, so pushes fire.
  function edit(record) {
    selected = record;
    const draft = record
      ? { recordName: record.recordName, recordType: record.recordType, recordChangeTag: record.recordChangeTag, fields: record.fields || {} }
      : { recordName: '', recordType: form.elements.type.value || '', fields: {} };
    const text = h('textarea', { id: 'record-json', rows: 22, style: 'width:100%', spellcheck: 'false' });
    text.value = JSON.stringify(draft, null, 2);
    const message = h('pre', { class: 'error', id: 'save-error' });
    const assets = record ? Object.entries(record.fields || {}).filter(([, f]) => f.type === 'ASSETID' && f.value?.downloadURL) : [];
    detail.replaceChildren(
      h('h3', {}, record ? `${record.recordType} ${record.recordName}` : 'New record'),
      h('div', { class: 'actions' },
        h('button', { class: 'primary', id: 'save-record', onclick: save }, record ? 'Save' : 'Create'),
        record ? h('button', { class: 'danger', onclick: remove }, 'Delete') : null),
      message, text,
      ...assets.map(([name, f]) => h('div', {}, h('a', { href: f.value.downloadURL, target: '_blank' }, `${name}: download`),
        h('img', { src: f.value.downloadURL, alt: name, style: 'max-width:100%;max-height:160px;display:block', onerror: (e) => e.target.remove() }))));

    async function save() {
      message.textContent = '';
      let parsed;
      try { parsed = JSON.parse(text.value); } catch (e) { message.textContent = `not JSON: ${e.message}`; return; }
      const operationType = selected ? 'update' : 'create';
      if (!selected) delete parsed.recordChangeTag;
      await modify({ operationType, record: parsed }, message);
    }
    async function remove() {
      if (!confirm(`Delete ${record.recordName}?`)) return;
      await modify({ operationType: 'delete', record: { recordName: record.recordName, recordChangeTag: record.recordChangeTag } }, message);
    }
  }

  async function modify(operation, message) {
    try {
      const body = { operations: [operation] };
      if (context.zone) body.zoneID = { zoneName: context.zone };
      const answer = await webServices(context, 'records/modify', body);
      const result = answer.records?.[0];
      if (result?.serverErrorCode) { message.textContent = `${result.serverErrorCode}: ${result.reason}`; return; }
      setStatus(`${operation.operationType}d ${result?.recordName || ''}`);
      await run(markers.at(-1) || null);
      if (result && !result.deleted) edit(result); else edit(null);
    } catch (e) {
      message.textContent = e.message;
    }
  }

  if (context.container && context.type) check().then((valid) => valid && run(null));
}
