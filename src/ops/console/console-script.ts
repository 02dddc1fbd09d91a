/**
 * The console's script, served as `console.js` (the page's CSP allows no inline script). Plain
 * browser JavaScript: every value from the database is written with textContent, never as HTML.
 */
export const CONSOLE_SCRIPT = String.raw`'use strict'
const base = document.querySelector('meta[name="oncely-base"]').content
const csrf = document.querySelector('meta[name="oncely-csrf"]').content
const canForceOutcome = document.querySelector('meta[name="oncely-force-outcome"]').content === 'token'
const $ = (id) => document.getElementById(id)
let previous

function el(tag, text, className) {
  const node = document.createElement(tag)
  if (text !== undefined && text !== null) node.textContent = String(text)
  if (className) node.className = className
  return node
}

function age(ms) {
  if (ms === null || ms === undefined) return ''
  if (ms < 60000) return (ms / 1000).toFixed(1) + ' s'
  const s = Math.floor(ms / 1000)
  if (s < 3600) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s'
  return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min'
}

function say(text, isError) {
  $('message').textContent = text
  $('message').className = isError ? 'error' : ''
}

async function call(path, body) {
  const response = await fetch(base + path, body === undefined ? { credentials: 'same-origin' } : {
    method: 'POST', credentials: 'same-origin',
    headers: { 'content-type': 'application/json', 'x-csrf-token': csrf },
    body: JSON.stringify(body),
  })
  const data = await response.json().catch(() => ({}))
  return { status: response.status, data }
}

function tile(container, label, value, alert) {
  const node = el('div', null, 'tile' + (alert ? ' alert' : ''))
  node.append(el('b', value), el('span', label))
  container.append(node)
}

function keyRow(key, withState) {
  const row = el('tr')
  row.dataset.user = key.scope
  row.dataset.key = key.key
  if (withState) row.append(el('td', key.state, 'state-' + key.state))
  row.append(el('td', key.scope), el('td', key.key, 'key'), el('td', age(key.ageMs)), el('td', age(key.leaseAgeMs)), el('td', key.recoveryPoint ?? ''))
  if (withState) {
    const cell = el('td')
    const show = el('button', 'Details')
    show.type = 'button'
    show.addEventListener('click', () => showKey(key.scope, key.key))
    cell.append(show)
    row.append(cell)
  }
  return row
}

async function refresh() {
  const { status, data } = await call('/api/overview')
  if (status !== 200) return say(data.detail ?? 'the console could not load', true)
  const rates = $('rates')
  if (data.outcomes && previous && previous.outcomes) {
    rates.replaceChildren()
    const seconds = (data.at - previous.at) / 1000
    for (const [outcome, total] of Object.entries(data.outcomes)) {
      const rate = Math.max(0, total - (previous.outcomes[outcome] ?? 0)) / seconds
      tile(rates, outcome, rate.toFixed(2), (outcome === 'conflict' || outcome === 'failed') && rate > 0)
    }
  } else if (!data.outcomes) {
    rates.replaceChildren(el('p', 'rates come from the service that answers requests: open its /console', 'muted'))
  }
  previous = data
  const counts = $('counts')
  counts.replaceChildren()
  const c = data.stats.counts
  tile(counts, 'running', c.inProgress - c.stuck)
  tile(counts, 'stuck or suspended', c.stuck, c.stuck > 0)
  tile(counts, 'completed', c.completed)
  tile(counts, 'failed', c.failed)
  tile(counts, 'past TTL, unswept', data.stats.sweeper.expiredUnswept)
  tile(counts, 'oldest running', data.stats.oldestRunning ? age(data.stats.oldestRunning.ageMs) : '—')
  $('stuck').replaceChildren(...(data.stuck.length ? data.stuck.map((key) => keyRow(key, true)) : [emptyRow(7, 'nothing stuck')]))
  $('running').replaceChildren(...(data.running.length ? data.running.map((key) => keyRow(key, false)) : [emptyRow(5, 'nothing running')]))
  $('updated').textContent = 'Updated ' + new Date(data.at).toLocaleTimeString() + '.'
}

function emptyRow(span, text) {
  const row = el('tr')
  const cell = el('td', text, 'muted')
  cell.colSpan = span
  row.append(cell)
  return row
}

async function showKey(user, key) {
  const { data } = await call('/api/keys?user=' + encodeURIComponent(user) + '&key=' + encodeURIComponent(key))
  const details = $('details')
  $('details-section').hidden = false
  if (!data.key) return details.replaceChildren(el('p', 'user ' + user + ' has no key ' + JSON.stringify(key), 'muted'))
  const k = data.key
  const list = el('dl')
  const add = (name, value) => list.append(el('dt', name), el('dd', value))
  add('user', k.scope); add('key', k.key); add('state', k.state); add('claim', k.claimId); add('fingerprint', k.fingerprint)
  add('recovery point', k.recoveryPoint ?? '(none)'); add('created', k.createdAt + ' (' + age(k.ageMs) + ' ago)')
  if (k.leaseAgeMs !== null) add('lease', 'renewed ' + age(k.leaseAgeMs) + ' ago')
  add('expires', k.expiresAt)
  if (k.interrupted) add('interrupted', 'taken over or suspended before: an earlier owner may have acted')
  if (k.outcomeError) add('outcome error', k.outcomeError)
  for (const step of k.steps) add('step ' + step.name, 'provider key ' + step.providerKey + '\n' + JSON.stringify(step.result))
  const parts = [list]
  if (k.response) {
    parts.push(el('h3', 'Stored response: ' + k.response.status))
    parts.push(el('pre', k.response.headers.map(([n, v]) => n + ': ' + v).join('\n') + '\n\n' + k.response.body))
  }
  const release = el('button', 'Release key', 'danger')
  release.type = 'button'
  release.id = 'release'
  release.addEventListener('click', () => releaseKey(k))
  parts.push(release)
  details.replaceChildren(...parts)
}

async function releaseKey(k) {
  if (!confirm('Release key ' + JSON.stringify(k.key) + ' of user ' + k.scope + '?\nThe next request with this key runs as a NEW operation.')) return
  let { status, data } = await call('/api/release', { user: k.scope, key: k.key })
  if (status === 409 && data.reason === 'may-have-acted') {
    const keys = (data.key.steps || []).map((s) => s.name + ': ' + s.providerKey).join('\n') || '(no step recorded; claim ' + data.key.claimId + ')'
    const force = { user: k.scope, key: k.key, force: true }
    if (data.key.status !== 'in_progress') {
      // A stored outcome: forcing throws it away, and the client's next retry acts again.
      if (!canForceOutcome) return say('not released: ' + data.detail + '. Forcing the release of a key with a stored outcome needs a console started with CONSOLE_TOKEN.', true)
      const typed = prompt(data.detail + '\n\nForcing throws the stored ' + data.key.status + ' answer away: the next retry with this key runs as a NEW operation and charges again.\nProvider keys to check:\n' + keys + '\n\nType the key to force its release:')
      if (typed === null) return say('not released')
      force.confirm = typed
    } else if (!confirm(data.detail + '\n\nProvider keys to check:\n' + keys + '\n\nRelease anyway?')) {
      return say('not released')
    }
    ;({ status, data } = await call('/api/release', force))
  }
  if (data.released) {
    say('released ' + JSON.stringify(k.key) + ': ' + data.detail)
    $('details-section').hidden = true
  } else {
    say('not released: ' + (data.detail ?? status), true)
  }
  await refresh()
}

const reconcileButton = $('reconcile')
if (reconcileButton) {
  reconcileButton.addEventListener('click', async () => {
    if (!confirm('Reconcile every stuck claim now? Each is looked up at the provider and settled, or left suspended.')) return
    const { status, data } = await call('/api/reconcile', {})
    if (status !== 200) return say('reconcile failed: ' + (data.detail ?? status), true)
    say(data.length === 0 ? 'no claim old enough to reconcile' : data.map((r) => r.decision + ' ' + r.key + ': ' + r.detail).join('; '))
    await refresh()
  })
}

$('search').addEventListener('submit', async (event) => {
  event.preventDefault()
  const form = new FormData(event.target)
  const user = String(form.get('user'))
  const key = String(form.get('key') ?? '')
  if (key) return showKey(user, key)
  const { data } = await call('/api/keys?user=' + encodeURIComponent(user))
  const table = el('table')
  const body = el('tbody')
  for (const k of data.keys ?? []) body.append(keyRow(k, true))
  table.append(body)
  $('results').replaceChildren(data.keys && data.keys.length ? table : el('p', 'no keys for user ' + user, 'muted'))
})

refresh().catch((error) => say(String(error), true))
setInterval(() => refresh().catch((error) => say(String(error), true)), 2000)
`
