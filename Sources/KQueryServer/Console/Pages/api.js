// The console's requests: its own API (always with the X-KQuery-Console header, which pages of
// other origins cannot send) and the Web Services endpoints, as a client would call them.

export class ConsoleError extends Error {
  constructor(status, body) {
    super(body && body.reason ? body.reason : `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function answer(response) {
  const text = await response.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch { body = { reason: text }; }
  if (!response.ok) throw new ConsoleError(response.status, body);
  return body;
}

/** GET or POST /console/api/<path>. */
export async function api(path, body) {
  const init = { headers: { 'X-KQuery-Console': '1' } };
  if (body !== undefined) {
    init.method = 'POST';
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  return answer(await fetch(`/console/api/${path}`, init));
}

const signedIn = new Map();

/** A Web Services request as `user` (signed in through the console), as any client sends it. */
export async function webServices(context, operation, body) {
  if (!context.user) throw new ConsoleError(400, { reason: 'choose a user to act as: writes are made by a signed-in user' });
  let tokens = signedIn.get(context.user);
  if (!tokens) {
    tokens = await api('signin', { user: context.user });
    signedIn.set(context.user, tokens);
  }
  const path = `/database/1/${encodeURIComponent(context.container)}/${context.environment}/${context.database}/${operation}`;
  const query = `ckAPIToken=${encodeURIComponent(tokens.apiToken)}&ckWebAuthToken=${encodeURIComponent(tokens.webAuthToken)}`;
  const response = await fetch(`${path}?${query}`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  const rotated = response.headers.get('X-Apple-CloudKit-Web-Auth-Token');
  if (rotated) tokens.webAuthToken = rotated;
  return answer(response);
}

/** An element: `h('td', {class: 'x'}, 'text', child)`. */
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on')) element.addEventListener(name.slice(2), value);
    else if (name === 'value') element.value = value;
    else element.setAttribute(name, value === true ? '' : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

export function setStatus(text) {
  document.getElementById('status').textContent = text;
}

/** The number and the noun, singular for one ("1 record", "2 records", "3 pushes"). */
export function count(number, singular, plural = singular + 's') {
  return `${number} ${number === 1 ? singular : plural}`;
}

export function time(milliseconds) {
  const date = new Date(milliseconds);
  return date.toLocaleTimeString([], { hour12: false }) + '.' + String(date.getMilliseconds()).padStart(3, '0');
}

export function pretty(text) {
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch { return text; }
}

/** Arrow keys move the selection in a table body whose rows are focusable. */
export function keyboardRows(tbody) {
  tbody.addEventListener('keydown', (event) => {
    const row = event.target.closest('tr');
    if (!row) return;
    const next = event.key === 'ArrowDown' ? row.nextElementSibling : event.key === 'ArrowUp' ? row.previousElementSibling : null;
    if (next) { event.preventDefault(); next.focus(); next.click(); }
    if (event.key === 'Enter') row.click();
  });
}

/** Polls `path?after=N` every second while `active()`; `onEntries` gets the new entries, newest first. */
export function poll(path, onEntries, active) {
  let last = 0;
  let stopped = false;
  async function tick() {
    if (stopped) return;
    if (active()) {
      try {
        const { entries } = await api(`${path}?after=${last}`);
        if (entries.length) { last = entries[0].number; onEntries(entries); }
      } catch (error) { setStatus(error.message); }
    }
    setTimeout(tick, 1000);
  }
  tick();
  return () => { stopped = true; };
}

/** The database a page shows, from its URL: container, environment, database and the user acted as. */
export function databaseContext(params, database) {
  return {
    container: params.get('container') || '', environment: params.get('environment') || 'development',
    database: params.get('database') || database, user: params.get('user') || '',
  };
}

/** The form choosing a page's database (its `context`'s fields), submitted by `label`. */
export function databaseForm(context, label, attributes = {}) {
  return h('form', { class: 'bar', ...attributes },
    h('label', {}, 'container', h('input', { name: 'container', value: context.container, size: 22, required: true })),
    h('label', {}, 'environment', h('select', { name: 'environment' }, ['development', 'production'].map((e) => h('option', { selected: e === context.environment }, e)))),
    h('label', {}, 'database', h('select', { name: 'database' }, ['public', 'private', 'shared'].map((d) => h('option', { selected: d === context.database }, d)))),
    h('label', {}, 'act as user', h('input', { name: 'user', value: context.user, size: 10, placeholder: '(none)' })),
    h('button', { class: 'primary', type: 'submit' }, label));
}
