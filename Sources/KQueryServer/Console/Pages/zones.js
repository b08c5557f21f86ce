// Schema, zones and data: the schema records must fit (enforced or learned) with the queries
// refused for want of an index; a database's zones with their current change tokens, and a replay
// of a zone's changes since a pasted token; export of a container to a file, import of one, and
// reset of an environment (after typing the container's name).
import { api, h, setStatus, databaseContext, databaseForm, count } from './api.js';

const refusedForIndex = /QUERYABLE|SORTABLE|SEARCHABLE|index/i;

export function zones(main, params) {
  const context = databaseContext(params, 'private');
  const form = databaseForm(context, 'Show', { id: 'zones-form' });
  const schema = h('pre', { id: 'schema-text' });
  const schemaSource = h('span', { class: 'muted' });
  const refused = h('tbody', { id: 'refused-queries' });
  const zoneRows = h('tbody', { id: 'zone-rows' });
  const replayZone = h('input', { id: 'replay-zone', size: 14, placeholder: 'zone name' });
  const replayToken = h('input', { id: 'replay-token', class: 'code', size: 60, placeholder: 'sync token (empty: from the beginning)' });
  const replayError = h('pre', { class: 'error' });
  const replayRows = h('tbody', { id: 'replay-rows' });
  const replayNext = h('div', { class: 'muted code', id: 'replay-next' });
  const importName = h('input', { id: 'import-name', size: 20, placeholder: 'iCloud.com.example.copy' });
  const dataMessage = h('div', { class: 'muted', id: 'data-message' });
  const resetConfirm = h('input', { id: 'reset-confirm', size: 24, placeholder: 'container identifier', autocomplete: 'off' });
  const resetButton = h('button', { type: 'submit', class: 'danger', id: 'reset-button', disabled: '' }, 'Reset');
  resetConfirm.addEventListener('input', () => { resetButton.disabled = resetConfirm.value.trim() !== form.elements.container.value.trim(); });
  main.append(form,
    h('div', { class: 'split even' },
      h('div', {},
        h('h2', {}, 'Zones and their current change tokens'),
        h('div', { class: 'scroll half' }, h('table', {},
          h('colgroup', {}, h('col', { style: 'width:160px' }), h('col', { style: 'width:70px' }), h('col'), h('col', { style: 'width:70px' })),
          h('thead', {}, h('tr', {}, ['zone', 'records', 'change token', ''].map((n) => h('th', {}, n)))), zoneRows)),
        h('h2', {}, 'Replay a zone\'s changes since a token'),
        h('form', { class: 'bar', onsubmit: replay }, replayZone, replayToken, h('button', { class: 'primary', type: 'submit' }, 'Replay')),
        replayError,
        h('div', { class: 'scroll half' }, h('table', {},
          h('thead', {}, h('tr', {}, ['record', 'type', 'change', 'changeTag'].map((n) => h('th', {}, n)))), replayRows)),
        replayNext),
      h('div', {},
        h('h2', {}, 'Data'),
        h('div', { class: 'bar' },
          h('button', { type: 'button', id: 'export', onclick: exportContainer }, 'Export container'),
          h('label', { class: 'inline' }, 'Import as new container ', importName),
          h('input', { type: 'file', id: 'import-file', 'aria-label': 'container file', onchange: importContainer })),
        h('details', { id: 'reset' },
          h('summary', {}, 'Reset an environment…'),
          h('p', { class: 'muted' }, 'Deletes every zone, record and subscription of the environment chosen above, as clients\' deletions do: ',
            'their change feeds show it and their pushes go out. Type the container\'s identifier to confirm.'),
          h('form', { class: 'bar', onsubmit: resetEnvironment }, resetConfirm, resetButton)),
        dataMessage,
        h('h2', {}, 'Schema ', schemaSource), schema,
        h('h2', {}, 'Queries refused for want of an index'),
        h('div', { class: 'scroll half' }, h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'request'), h('th', {}, 'reason'))), refused)))));

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    for (const name of Object.keys(context)) context[name] = form.elements[name].value.trim();
    const query = new URLSearchParams(Object.entries(context).filter(([, v]) => v));
    history.replaceState(null, '', `/console/zones?${query}`);
    try {
      const [{ zones }, answer, { entries }] = await Promise.all([api(`zones?${query}`), api(`schema?${query}`), api('requests')]);
      zoneRows.replaceChildren(...zones.map((zone) => h('tr', {},
        h('td', { class: 'code' }, zone.zoneName), h('td', {}, zone.records ?? ''),
        h('td', { class: 'code', title: zone.syncToken || '' }, zone.syncToken || '(no change tracking)'),
        h('td', {}, zone.syncToken ? h('button', { type: 'button', onclick: () => { replayZone.value = zone.zoneName; replayToken.value = zone.syncToken; } }, 'Use') : ''))));
      schemaSource.textContent = `(${answer.source})`;
      schema.textContent = answer.text || '(no record types yet)';
      const refusals = entries.filter((e) => e.operation === 'records/query' && e.status === 400 && refusedForIndex.test(e.responseBody));
      refused.replaceChildren(...(refusals.length ? refusals.map((e) => {
        let reason = e.responseBody;
        try { reason = JSON.parse(e.responseBody).reason; } catch {}
        return h('tr', {}, h('td', { class: 'code', title: e.requestBody }, e.requestBody), h('td', { title: reason }, reason));
      }) : [h('tr', {}, h('td', { class: 'empty', colspan: 2 }, 'None in the request log.'))]));
      setStatus(count(zones.length, 'zone'));
    } catch (e) { setStatus(e.message); }
  });

  // The console API wants its header, which a plain link cannot send: fetched, then saved.
  async function exportContainer() {
    const container = form.elements.container.value.trim();
    const response = await fetch(`/console/api/export?container=${encodeURIComponent(container)}`, { headers: { 'X-KQuery-Console': '1' } });
    if (!response.ok) { dataMessage.textContent = (await response.json()).reason; return; }
    const link = h('a', { href: URL.createObjectURL(await response.blob()), download: `${container}.container` });
    link.click();
    URL.revokeObjectURL(link.href);
    dataMessage.textContent = `exported ${container}`;
  }

  async function importContainer(event) {
    const file = event.target.files[0];
    const name = importName.value.trim();
    if (!file || !name) { dataMessage.textContent = 'name the new container, then choose a container file'; return; }
    const response = await fetch(`/console/api/import?container=${encodeURIComponent(name)}`, {
      method: 'POST', headers: { 'X-KQuery-Console': '1' }, body: file,
    });
    const answer = await response.json();
    dataMessage.textContent = response.ok ? `imported into ${answer.container}` : answer.reason;
    event.target.value = '';
  }

  async function resetEnvironment(event) {
    event.preventDefault();
    const container = form.elements.container.value.trim();
    const environment = form.elements.environment.value.trim() || 'development';
    try {
      const answer = await api('reset', { container, environment, confirm: resetConfirm.value.trim() });
      dataMessage.textContent = `reset ${environment} of ${container}: ${count(answer.zones, 'zone')}, ${count(answer.records, 'record')}, `
        + `${count(answer.subscriptions, 'subscription')} deleted in ${count(answer.databases, 'database')}; ${count(answer.notifications, 'push', 'pushes')} queued`;
      resetConfirm.value = '';
      resetButton.disabled = true;
      form.requestSubmit();
    } catch (e) { dataMessage.textContent = e.message; }
  }

  async function replay(event) {
    event.preventDefault();
    replayError.textContent = '';
    try {
      const answer = await api('zones/changes', { ...context, zone: replayZone.value.trim(), syncToken: replayToken.value.trim() });
      replayRows.replaceChildren(...(answer.records.length ? answer.records.map((r) => h('tr', {},
        h('td', { class: 'code' }, r.recordName), h('td', {}, r.recordType || ''), h('td', {}, r.deleted ? 'deleted' : 'changed'),
        h('td', { class: 'code' }, r.recordChangeTag || '')))
        : [h('tr', {}, h('td', { class: 'empty', colspan: 4 }, 'No changes since that token.'))]));
      replayNext.textContent = `next token: ${answer.syncToken}${answer.moreComing ? ' (more coming)' : ''}`;
    } catch (e) {
      replayError.textContent = e.message;
    }
  }

  if (context.container) form.requestSubmit();
  else api('overview').then((o) => { form.elements.container.value = o.containers[0] || ''; }).catch((e) => setStatus(e.message));
}
