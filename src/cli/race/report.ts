import type { RaceRow } from './run-scenario.js'

/** The whole measured run, as `--json` prints it. */
export interface RaceReport {
  postgres: { version: string; source: 'embedded' | 'DATABASE_URL' }
  providerLatencyMs: number
  staleAfterMs: number
  rows: RaceRow[]
  /** Every row matches the article. */
  matches: boolean
  durationMs: number
}

/** The measured table, as Markdown, with a heading line and a closing verdict. */
export function formatTable(report: RaceReport): string {
  const header = ['strategy', 'scenario', 'outcome of the requests', 'provider charges', 'article']
  const body = report.rows.map((row) => [
    `\`${row.strategy}\``,
    row.description,
    outcome(row),
    row.charges === null ? '?' : String(row.charges),
    row.matches ? 'matches' : `differs (article: ${article(row)})`,
  ])
  const widths = header.map((title, i) => Math.max(title.length, ...body.map((cells) => cells[i]?.length ?? 0)))
  const line = (cells: string[]) => `| ${cells.map((cell, i) => cell.padEnd(widths[i] ?? 0)).join(' | ')} |`
  const lines = [
    `oncely race: PostgreSQL ${report.postgres.version} (${report.postgres.source}), provider call ${report.providerLatencyMs} ms, stale after ${report.staleAfterMs} ms`,
    '',
    line(header),
    `|${widths.map((width) => '-'.repeat(width + 2)).join('|')}|`,
    ...body.map(line),
    '',
  ]
  for (const row of report.rows) if (row.error !== undefined) lines.push(`${row.strategy}, ${row.scenario}: ${row.error}`)
  const failed = report.rows.filter((row) => !row.matches).length
  lines.push(
    failed === 0
      ? `every row matches the article (${(report.durationMs / 1000).toFixed(1)} s)`
      : `${failed} of ${report.rows.length} rows differ from the article (${(report.durationMs / 1000).toFixed(1)} s)`,
  )
  return `${lines.join('\n')}\n`
}

/** `201 and 409`, or for a crash `crashed, then 409 ×4, 201`. */
export function outcome(row: RaceRow): string {
  if (row.scenario === 'concurrent') return row.statuses.map((status) => status ?? 'no answer').join(' and ') || 'none'
  const [first, ...retries] = row.statuses
  const head = first === undefined ? 'not sent' : first === null ? 'crashed' : `${first} (no crash)`
  return retries.length === 0 ? head : `${head}, then ${runs(retries)}`
}

function article(row: RaceRow): string {
  const { expected } = row
  const charges = `${expected.charges} charge${expected.charges === 1 ? '' : 's'}`
  if (expected.statuses) return `${expected.statuses.join(' and ')}, ${charges}`
  return `crashed, then 409s and ${expected.finalStatus ?? '?'}, ${charges}`
}

/** `409 ×3, 201`: repeated statuses folded. */
function runs(statuses: ReadonlyArray<number | null>): string {
  const parts: string[] = []
  let i = 0
  while (i < statuses.length) {
    let j = i
    while (j + 1 < statuses.length && statuses[j + 1] === statuses[i]) j++
    const label = String(statuses[i] ?? 'no answer')
    parts.push(j > i ? `${label} ×${j - i + 1}` : label)
    i = j + 1
  }
  return parts.join(', ')
}
