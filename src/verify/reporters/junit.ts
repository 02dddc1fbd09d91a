import type { ConformanceReport } from '../runner.js'

// XML 1.0 allows no control character but tab, newline and carriage return, even escaped.
const escape = (text: string) =>
  text.replace(/[&<>"']/g, (char) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&apos;' })[char] ?? char).replace(/[^\t\n\r\u{20}-\u{d7ff}\u{e000}-\u{fffd}\u{10000}-\u{10ffff}]/gu, '')

/** The report as JUnit XML: one testsuite, one testcase per check, `<skipped>` with its reason. */
export function formatJUnit(report: ConformanceReport): string {
  const seconds = (ms: number) => (ms / 1000).toFixed(3)
  const cases = report.results.map((result) => {
    const open = `    <testcase classname="oncely.verify" name="${escape(`${result.id}: ${result.title}`)}" time="${seconds(result.durationMs)}"`
    if (result.outcome === 'pass') return `${open}/>`
    if (result.outcome === 'skip') return `${open}>\n      <skipped message="${escape(result.reason)}"/>\n    </testcase>`
    const details = [`expected: ${result.expected}`, `seen: ${result.seen}`, ...result.sent.map((sent) => `sent: ${sent}`)].join('\n')
    return `${open}>\n      <failure message="${escape(result.reason)}">${escape(details)}</failure>\n    </testcase>`
  })
  return [
    '<?xml version="1.0" encoding="UTF-8"?>',
    `<testsuites tests="${report.results.length}" failures="${report.failed}" skipped="${report.skipped}" time="${seconds(report.durationMs)}">`,
    `  <testsuite name="${escape(`oncely verify ${report.target}`)}" tests="${report.results.length}" failures="${report.failed}" errors="0" skipped="${report.skipped}" time="${seconds(report.durationMs)}">`,
    ...cases,
    '  </testsuite>',
    '</testsuites>',
    '',
  ].join('\n')
}
