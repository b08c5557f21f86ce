// The console's shell: shows the page its URL names (each page is a URL that can be pasted).
import { records } from './records.js';
import { requests } from './requests.js';
import { subscriptions } from './subscriptions.js';
import { zones } from './zones.js';

const pages = { records, requests, subscriptions, zones };
let leave = () => {};

function show() {
  const name = location.pathname.replace(/^\/console\/?/, '').split('/')[0] || 'records';
  const page = pages[name] || records;
  for (const link of document.querySelectorAll('nav a')) link.classList.toggle('current', link.dataset.page === name);
  leave();
  document.getElementById('status').textContent = '';
  const main = document.getElementById('page');
  main.replaceChildren();
  leave = page(main, new URLSearchParams(location.search)) || (() => {});
}

document.addEventListener('click', (event) => {
  const link = event.target.closest('a[href^="/console/"]');
  if (!link || event.metaKey || event.ctrlKey || event.shiftKey) return;
  event.preventDefault();
  history.pushState(null, '', link.getAttribute('href'));
  show();
});
window.addEventListener('popstate', show);
// "/" goes to the page's main box (the predicate, the request filter); Escape leaves a box.
document.addEventListener('keydown', (event) => {
  const typing = ['INPUT', 'TEXTAREA', 'SELECT'].includes(document.activeElement.tagName);
  if (event.key === '/' && !typing) {
    const box = document.querySelector('[data-focus]');
    if (box) { event.preventDefault(); box.focus(); box.select?.(); }
  }
  if (event.key === 'Escape' && typing) document.activeElement.blur();
});
show();
