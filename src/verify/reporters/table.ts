import type { CheckResult } from '../check-result.js'
import type { ConformanceReport } from '../runner.js'

const MARK = { pass: 'PASS', fail: 'FAIL', skip: 'SKIP' } as const

/** One line per check, then the details of each failure and a closing count. */
export function formatTable(report: ConformanceReport): string {
  const width = Math.max(...report.results.map((result) => result.id.length), 2)
  const lines = [`oncely verify ${report.target}`, '', `  ${'result'.padEnd(6)}  ${'check'.padEnd(width)}  what`]
  for (const result of report.results) lines.push(`  ${MARK[result.outcome].padEnd(6)}  ${result.id.padEnd(width)}  ${lineOf(result)}`)
  const failures = report.results.filter((result) => result.outcome === 'fail')
  for (const result of failures) {
    lines.push('', `${result.id}: ${result.title}`, `  why:      ${result.reason}`)
    if (result.expected !== '') lines.push(`  expected: ${result.expected}`)
    if (result.seen !== '') lines.push(`  seen:     ${result.seen}`)
    for (const sent of result.sent) lines.push(`  sent:     ${sent}`)
  }
  lines.push('', `${report.passed} passed, ${report.failed} failed, ${report.skipped} skipped in ${(report.durationMs / 1000).toFixed(1)} s`, '')
  return lines.join('\n')
}

function lineOf(result: CheckResult): string {
  if (result.outcome === 'skip') return `${result.title} (skipped: ${result.reason})`
  if (result.outcome === 'fail') return `${result.title}: ${result.reason}`
  return result.reason === '' ? result.title : `${result.title} (${result.reason})`
}
