// Subscriptions and pushes: a database's subscriptions; for a recent record change, every
// subscription's verdict (fired, or the first reason it did not); the live push log.
import { api, h, poll, time, setStatus, keyboardRows, databaseContext, databaseForm } from './api.js';

export function subscriptions(main, params) {
  const context = databaseContext(params, 'public');
  const form = databaseForm(context, 'Show subscriptions');
  const subscriptionTable = h('table', { id: 'subscriptions' });
  const changes = h('tbody', { id: 'changes' });
  keyboardRows(changes);
  const explanation = h('div', { id: 'explanation', class: 'panel' }, h('div', { class: 'empty' }, 'Pick a change to see why each subscription fired or did not.'));
  const pushes = h('tbody', { id: 'pushes' });
  main.append(
    h('div', { class: 'split even' },
      h('div', {},
        h('h2', {}, 'Recent record changes'),
        h('div', { class: 'scroll half' }, h('table', {},
          h('colgroup', {}, [50, 105, 70, null, 110, 90].map((w) => h('col', { style: w ? `width:${w}px` : '' }))),
          h('thead', {}, h('tr', {}, ['#', 'time', 'change', 'record', 'type', 'database'].map((n) => h('th', {}, n)))), changes)),
        h('div', { class: 'bar' }, h('h2', {}, 'Push log'),
          h('form', { class: 'bar', id: 'test-push', onsubmit: testPush },
            h('input', { name: 'user', size: 10, placeholder: '_alice', 'aria-label': 'user to push to' }),
            h('button', { type: 'submit' }, 'Send a test push'))),
        h('div', { class: 'scroll half' }, h('table', {},
          h('colgroup', {}, [50, 105, 90, 90, 120, 140, null].map((w) => h('col', { style: w ? `width:${w}px` : '' }))),
          h('thead', {}, h('tr', {}, ['#', 'time', 'channel', 'to', 'subscription', 'outcome', 'payload'].map((n) => h('th', {}, n)))), pushes))),
      h('div', {}, h('h2', {}, 'Subscription verdicts'), explanation)),
    h('h2', {}, 'Subscriptions of a database'), form, h('div', { class: 'scroll half' }, subscriptionTable));

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    for (const name of Object.keys(context)) context[name] = form.elements[name].value.trim();
    try {
      const { subscriptions } = await api(`subscriptions?${new URLSearchParams(Object.entries(context).filter(([, v]) => v))}`);
      subscriptionTable.replaceChildren(
        h('thead', {}, h('tr', {}, ['subscriptionID', 'owner', 'type', 'record type', 'firesOn', 'predicate or zone'].map((n) => h('th', {}, n)))),
        h('tbody', {}, subscriptions.length ? subscriptions.map((s) => h('tr', {},
          h('td', { class: 'code' }, s.subscriptionID), h('td', {}, s.ownerRecordName), h('td', {}, s.subscriptionType),
          h('td', {}, s.query?.recordType || ''), h('td', {}, (s.firesOn || []).join(' ')),
          h('td', { class: 'code', title: s.predicate || s.zoneID?.zoneName || '' }, s.predicate || s.zoneID?.zoneName || '')))
          : h('tr', {}, h('td', { class: 'empty', colspan: 6 }, 'No subscriptions.'))));
    } catch (e) { setStatus(e.message); }
  });

  // A push to the user, through the outbox, the web courier and APNs as any other.
  async function testPush(event) {
    event.preventDefault();
    const user = event.target.elements.user.value.trim();
    const container = form.elements.container.value.trim();
    try {
      await api('testpush', { container, environment: form.elements.environment.value, user });
      setStatus(`test push queued for ${user}`);
    } catch (e) { setStatus(e.message); }
  }

  async function explain(number) {
    try {
      const { change, verdicts } = await api(`explain?change=${number}`);
      history.replaceState(null, '', `/console/subscriptions?change=${number}`);
      for (const row of changes.querySelectorAll('tr')) row.classList.toggle('selected', row.dataset.number === String(number));
      explanation.replaceChildren(
        h('h3', {}, `#${change.number}: ${change.recordType} ${change.recordName} ${change.kind}`),
        h('div', { class: 'muted' }, `${change.container} · ${change.environment} · ${change.database}${change.user ? ' of ' + change.user : ''} · zone ${change.zoneName}${change.device ? ' · by device ' + change.device : ''}`),
        h('table', { id: 'verdicts' },
          h('colgroup', {}, h('col', { style: 'width:120px' }), h('col', { style: 'width:80px' }), h('col')),
          h('thead', {}, h('tr', {}, ['subscription', 'owner', 'verdict'].map((n) => h('th', {}, n)))),
          h('tbody', {}, verdicts.length ? verdicts.map((v) => h('tr', {},
            h('td', { class: 'code', title: v.subscriptionID }, v.subscriptionID), h('td', {}, v.owner),
            h('td', { class: v.fired ? 'fired' : 'not', title: v.reason + (v.note ? ` (${v.note})` : '') },
              v.clause ? ['predicate clause false: ', h('span', { class: 'clause' }, v.clause)] : v.reason, v.note ? h('span', { class: 'muted' }, ` · ${v.note}`) : null)))
            : h('tr', {}, h('td', { class: 'empty', colspan: 3 }, 'No subscription in this database.')))));
    } catch (e) {
      explanation.replaceChildren(h('pre', { class: 'error' }, e.message));
    }
  }

  const stopChanges = poll('changes', (fresh) => {
    changes.prepend(...fresh.map((c) => h('tr', { tabindex: 0, 'data-number': c.number, onclick: () => explain(c.number) },
      h('td', {}, c.number), h('td', {}, time(c.time)), h('td', {}, c.kind), h('td', { class: 'code' }, c.recordName),
      h('td', {}, c.recordType), h('td', {}, c.database + (c.user ? ` (${c.user})` : '')))));
    while (changes.children.length > 200) changes.lastElementChild.remove();
  }, () => true);
  const stopPushes = poll('pushes', (fresh) => {
    pushes.prepend(...fresh.map((p) => h('tr', {},
      h('td', {}, p.number), h('td', {}, time(p.time)), h('td', {}, p.channel), h('td', { title: p.device || '' }, p.owner),
      h('td', { class: 'code' }, p.subscriptionID || ''), h('td', { title: p.outcome }, p.outcome),
      h('td', { class: 'code', title: JSON.stringify(p.payload) }, JSON.stringify(p.payload)))));
    while (pushes.children.length > 500) pushes.lastElementChild.remove();
  }, () => true);

  if (params.get('change')) explain(Number(params.get('change')));
  if (!context.container) {
    api('overview').then((overview) => { if (!form.elements.container.value) form.elements.container.value = overview.containers[0] || ''; })
      .catch((e) => setStatus(e.message));
  }
  if (context.container) form.requestSubmit();
  return () => { stopChanges(); stopPushes(); };
}
