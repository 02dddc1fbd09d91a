// Turns Stryker JSON reports into a markdown summary (issue 13):
//
//   node bench/mutation-summary.mjs report.json [more.json …] [--merge merged.json]
//
// Several reports (one per narrowed run) are merged, a later report's file replacing an earlier
// one's. `report.json@src/a.ts,src/b.ts` takes only those files of a report (a run's report also
// holds every file its incremental file knew). `overlay:report.json` is a run over line ranges:
// its mutants' results replace those of the same mutants (place, mutator, replacement) already
// merged, and the rest of each file stays as it was. The score is Stryker's with no-coverage mutants counted as survivors:
// (killed + timeout) / (killed + timeout + survived + no coverage). Compile and runtime errors and
// ignored mutants are not counted. Static mutants (evaluated once, when the module loads) are
// counted apart: Stryker 9.6 cannot kill them when the test files are narrowed (its issue 6144),
// so they are neither in the score nor hidden. `--merge` writes the merged report (test ids
// prefixed by the report's index so they stay unique); it serves for the incremental files too,
// which have the same shape.
import { readFileSync, writeFileSync } from 'node:fs'

const args = process.argv.slice(2)
const mergeAt = args.indexOf('--merge')
const mergeTo = mergeAt >= 0 ? args[mergeAt + 1] : undefined
const inputs = args.filter((_, i) => mergeAt < 0 || (i !== mergeAt && i !== mergeAt + 1))
if (inputs.length === 0) {
  process.stderr.write('usage: node bench/mutation-summary.mjs report.json [more.json …] [--merge merged.json]\n')
  process.exit(2)
}

const merged = { files: {}, testFiles: {} }
const sameMutant = (a, b) =>
  a.mutatorName === b.mutatorName && a.replacement === b.replacement && a.location.start.line === b.location.start.line && a.location.start.column === b.location.start.column
inputs.forEach((input, index) => {
  const overlay = input.startsWith('overlay:')
  const [path, only] = (overlay ? input.slice('overlay:'.length) : input).split('@')
  const report = JSON.parse(readFileSync(path, 'utf8'))
  if (only !== undefined) {
    const wanted = new Set(only.split(','))
    report.files = Object.fromEntries(Object.entries(report.files ?? {}).filter(([file]) => wanted.has(file)))
  }
  const prefix = inputs.length > 1 ? `r${index}-` : ''
  const rename = (id) => `${prefix}${id}`
  if (overlay) {
    for (const [file, entry] of Object.entries(report.files ?? {})) {
      const into = merged.files[file]
      if (into === undefined || into.source !== entry.source) throw new Error(`overlay ${path}: ${file} is not merged yet, or its source changed since`)
      for (const m of entry.mutants) {
        const target = into.mutants.find((t) => sameMutant(t, m))
        if (target === undefined) continue
        Object.assign(target, { status: m.status, statusReason: m.statusReason, static: m.static, coveredBy: (m.coveredBy ?? []).map(rename), killedBy: (m.killedBy ?? []).map(rename) })
      }
    }
  }
  merged.schemaVersion ??= report.schemaVersion
  merged.thresholds ??= report.thresholds
  merged.projectRoot ??= report.projectRoot
  merged.config ??= report.config
  merged.framework ??= report.framework
  for (const [file, entry] of overlay ? [] : Object.entries(report.files ?? {})) {
    merged.files[file] = {
      ...entry,
      mutants: entry.mutants.map((m) => ({
        ...m,
        ...(m.coveredBy ? { coveredBy: m.coveredBy.map(rename) } : {}),
        ...(m.killedBy ? { killedBy: m.killedBy.map(rename) } : {}),
      })),
    }
  }
  for (const [file, entry] of Object.entries(report.testFiles ?? {})) {
    const tests = (entry.tests ?? []).map((t) => ({ ...t, id: rename(t.id) }))
    const known = merged.testFiles[file]?.tests ?? []
    merged.testFiles[file] = { ...entry, tests: [...known, ...tests] }
  }
})
if (mergeTo) writeFileSync(mergeTo, `${JSON.stringify(merged)}\n`)

const counted = { Killed: 'killed', Timeout: 'killed', Survived: 'survived', NoCoverage: 'survived' }
const empty = () => ({ killed: 0, survived: 0, noCoverage: 0, static: 0, staticKilled: 0, errors: 0, ignored: 0 })
const add = (into, from) => { for (const k of Object.keys(into)) into[k] += from[k] }
const score = (t) => (t.killed + t.survived === 0 ? 'n/a' : `${((100 * t.killed) / (t.killed + t.survived)).toFixed(2)} %`)

const rows = []
const folders = new Map()
const survivors = []
const statics = []
for (const file of Object.keys(merged.files).sort()) {
  const t = empty()
  for (const m of merged.files[file].mutants) {
    const at = `${file}:${m.location.start.line}`
    if (m.status === 'CompileError' || m.status === 'RuntimeError') { t.errors++; continue }
    if (m.status === 'Ignored') { t.ignored++; continue }
    if (m.static) {
      t.static++
      if (counted[m.status] === 'killed') t.staticKilled++
      else statics.push({ at, m })
      continue
    }
    if (counted[m.status] === 'killed') t.killed++
    else {
      t.survived++
      if (m.status === 'NoCoverage') t.noCoverage++
      survivors.push({ at, m })
    }
  }
  rows.push({ file, t })
  const folder = file.slice(0, file.lastIndexOf('/'))
  if (!folders.has(folder)) folders.set(folder, empty())
  add(folders.get(folder), t)
}

const out = []
const line = (s = '') => out.push(s)
const snippet = (m) => (m.replacement ?? '').replace(/\s+/g, ' ').slice(0, 60).replace(/\|/g, '\\|')
line('| file | killed | survived | of which no coverage | score | static (killed / all) | errors | ignored |')
line('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |')
for (const { file, t } of rows) {
  line(`| \`${file}\` | ${t.killed} | ${t.survived} | ${t.noCoverage} | ${score(t)} | ${t.staticKilled} / ${t.static} | ${t.errors} | ${t.ignored} |`)
}
line()
line('| folder | killed | survived | of which no coverage | score | static (killed / all) |')
line('| --- | ---: | ---: | ---: | ---: | ---: |')
for (const [folder, t] of [...folders].sort()) {
  line(`| \`${folder}\` | ${t.killed} | ${t.survived} | ${t.noCoverage} | ${score(t)} | ${t.staticKilled} / ${t.static} |`)
}
line()
line('### Survivors (no coverage included)')
line()
for (const { at, m } of survivors) line(`- \`${at}\` ${m.mutatorName}${m.status === 'NoCoverage' ? ' (no coverage)' : ''}: \`${snippet(m)}\``)
if (survivors.length === 0) line('- none')
line()
line('### Static mutants not killed (not in the score)')
line()
for (const { at, m } of statics) line(`- \`${at}\` ${m.mutatorName} (${m.status}): \`${snippet(m)}\``)
if (statics.length === 0) line('- none')
process.stdout.write(`${out.join('\n')}\n`)
