/** The console's HTML and CSS: plain, no build step, no framework; the script is `console-script.ts`. */

const STYLE = `
:root { color-scheme: light dark; --muted: #6b7280; --line: #d1d5db; --stuck: #b45309; --bad: #b91c1c; --ok: #15803d; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; padding: 1rem 1.5rem 3rem; max-width: 78rem; }
h1 { font-size: 1.25rem; margin: 0 0 .25rem; } h2 { font-size: 1rem; margin: 1.5rem 0 .5rem; }
header p, .muted { color: var(--muted); margin: 0; }
.tiles { display: grid; grid-template-columns: repeat(auto-fill, minmax(9rem, 1fr)); gap: .5rem; margin-top: 1rem; }
.tile { border: 1px solid var(--line); border-radius: .4rem; padding: .5rem .75rem; }
.tile b { display: block; font-size: 1.35rem; font-variant-numeric: tabular-nums; }
.tile.alert b { color: var(--stuck); }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
th, td { text-align: left; padding: .3rem .5rem; border-bottom: 1px solid var(--line); vertical-align: top; }
th { font-weight: 600; color: var(--muted); }
td.key { font-family: ui-monospace, monospace; word-break: break-all; }
.state-stuck, .state-suspended { color: var(--stuck); font-weight: 600; } .state-failed { color: var(--bad); } .state-completed { color: var(--ok); }
form { display: flex; gap: .5rem; flex-wrap: wrap; align-items: center; }
input { font: inherit; padding: .3rem .5rem; border: 1px solid var(--line); border-radius: .3rem; }
button { font: inherit; padding: .3rem .75rem; border-radius: .3rem; border: 1px solid var(--line); background: transparent; cursor: pointer; }
button.danger { border-color: var(--bad); color: var(--bad); }
pre { background: rgba(127,127,127,.1); padding: .5rem; border-radius: .3rem; overflow: auto; max-height: 20rem; white-space: pre-wrap; word-break: break-all; }
#details dl { display: grid; grid-template-columns: max-content 1fr; gap: .15rem 1rem; margin: 0; }
#details dt { color: var(--muted); } #details dd { margin: 0; font-family: ui-monospace, monospace; word-break: break-all; }
#message { min-height: 1.4rem; margin-top: .5rem; } #message.error { color: var(--bad); }
`

const escapeAttribute = (value: string) => value.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;')

export function consolePage(options: { basePath: string; csrf: string; canReconcile: boolean; canForceOutcome: boolean }): string {
  const base = escapeAttribute(options.basePath)
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="oncely-csrf" content="${escapeAttribute(options.csrf)}">
<meta name="oncely-base" content="${base}">
<meta name="oncely-force-outcome" content="${options.canForceOutcome ? 'token' : 'no'}">
<title>oncely console</title>
<style>${STYLE}</style>
</head>
<body>
<header>
  <h1>oncely console</h1>
  <p>Idempotency keys: what runs, what is stuck, what was answered. Refreshes every 2 s. <span id="updated"></span></p>
</header>
<section aria-labelledby="rates-title">
  <h2 id="rates-title">Requests per second, by outcome</h2>
  <div class="tiles" id="rates"><p class="muted">waiting for a second sample…</p></div>
</section>
<section aria-labelledby="state-title">
  <h2 id="state-title">Keys by state</h2>
  <div class="tiles" id="counts"></div>
</section>
<section aria-labelledby="stuck-title">
  <h2 id="stuck-title">Stuck and suspended claims</h2>
  <p class="muted">Owners that stopped renewing past the stale threshold, and claims given up for a retry. ${options.canReconcile ? '<button type="button" id="reconcile">Reconcile now</button>' : ''}</p>
  <table><thead><tr><th>state</th><th>user</th><th>key</th><th>age</th><th>lease age</th><th>recovery point</th><th></th></tr></thead><tbody id="stuck"></tbody></table>
</section>
<section aria-labelledby="running-title">
  <h2 id="running-title">Running claims</h2>
  <table><thead><tr><th>user</th><th>key</th><th>age</th><th>lease age</th><th>recovery point</th></tr></thead><tbody id="running"></tbody></table>
</section>
<section aria-labelledby="search-title">
  <h2 id="search-title">Find a key</h2>
  <form id="search"><input name="user" placeholder="user" required aria-label="user"><input name="key" placeholder="key (empty: the user's keys)" aria-label="key" size="40"><button type="submit">Find</button></form>
  <div id="results"></div>
</section>
<section aria-labelledby="details-title" id="details-section" hidden>
  <h2 id="details-title">Key details</h2>
  <div id="details"></div>
</section>
<div id="message" role="status"></div>
<script src="${base}/console.js"></script>
</body>
</html>`
}

export function loginPage(basePath: string, error?: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>oncely console: log in</title><style>${STYLE}</style></head>
<body><h1>oncely console</h1><p class="muted">This console shows every user's stored responses. Enter the CONSOLE_TOKEN it was started with.</p>
${error === undefined ? '' : `<p id="message" class="error">${escapeAttribute(error)}</p>`}
<form method="post" action="${escapeAttribute(basePath)}/login"><input type="password" name="token" aria-label="token" autocomplete="current-password" required><button type="submit">Log in</button></form>
</body></html>`
}
