// Applies mutants by hand, one at a time, and runs the test files that state their behaviour
// (issue 13). For the static mutants that Stryker 9.6 reports `Survived` without switching them on
// when the test files are narrowed (its issue 6144): docs/mutation-report.md, "Static mutants,
// checked by hand".
//
//   DATABASE_URL=postgres://… node bench/mutation-by-hand.mjs bench/results/static-mutants.json [--skip 3,7] [--timeout 180]
//
// Each entry is { id, file, find, replace, tests }: `find` must occur exactly once in `file`; it is
// replaced by `replace`, `npx vitest run <tests>` runs, and the file is restored whatever happens.
// Prints one line per mutant: killed (a test failed), survived (all passed) or hung (the timeout
// passed; not counted as killed). Run it on a clean tree: it rewrites source files while it works.
import { spawnSync } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'

const args = process.argv.slice(2)
const option = (name) => {
  const at = args.indexOf(name)
  return at >= 0 ? args[at + 1] : undefined
}
const listFile = args.find((arg, i) => !arg.startsWith('--') && !['--skip', '--timeout'].includes(args[i - 1]))
if (listFile === undefined) {
  process.stderr.write('usage: node bench/mutation-by-hand.mjs mutants.json [--skip i,j] [--timeout seconds]\n')
  process.exit(2)
}
const skip = new Set((option('--skip') ?? '').split(',').filter(Boolean).map(Number))
const timeoutMs = Number(option('--timeout') ?? 180) * 1000
const mutants = JSON.parse(readFileSync(listFile, 'utf8'))
const tally = { killed: 0, survived: 0, hung: 0, skipped: 0 }

for (const [index, mutant] of mutants.entries()) {
  if (skip.has(index)) {
    tally.skipped++
    continue
  }
  const original = readFileSync(mutant.file, 'utf8')
  const matches = original.split(mutant.find).length - 1
  if (matches !== 1) {
    console.log(`#${index} ${mutant.id}: not applied, its text occurs ${matches} times`)
    tally.skipped++
    continue
  }
  writeFileSync(mutant.file, original.replace(mutant.find, () => mutant.replace))
  try {
    // A process group of its own, so a hung run's vitest workers are ended with it.
    const run = spawnSync('npx', ['vitest', 'run', ...mutant.tests], { encoding: 'utf8', timeout: timeoutMs, killSignal: 'SIGKILL', detached: true })
    if (run.signal) {
      try {
        process.kill(-run.pid, 'SIGKILL')
      } catch {
        // The group has already ended.
      }
    }
    const output = `${run.stdout ?? ''}${run.stderr ?? ''}`
    const verdict = run.signal ? 'hung' : /\b[1-9]\d* failed\b/.test(output) || run.status !== 0 ? 'killed' : 'survived'
    tally[verdict]++
    console.log(`#${index} ${mutant.id}: ${verdict}`)
  } finally {
    writeFileSync(mutant.file, original)
  }
}
console.log(`${tally.killed} killed, ${tally.survived} survived, ${tally.hung} hung, ${tally.skipped} skipped`)
