import { execFileSync } from 'node:child_process'
import { mkdir, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

/**
 * One measured figure, always beside the baseline measured in the same run: absolute numbers on
 * a shared 2-core machine are noise, the ratio is what the run says.
 */
export interface Figure {
  section: string
  name: string
  unit: string
  /** Median over the runs. */
  value: number
  /** Every run's value, in the order measured. */
  runs: number[]
  baseline: { name: string; value: number }
  /** value / baseline. */
  ratio: number
  /** The target for the ratio: `>=` for throughput, `<=` for latency. */
  target?: { compare: '>=' | '<='; ratio: number; label?: string }
  extra?: Record<string, number | string>
}

export function figure(input: Omit<Figure, 'ratio' | 'value'> & { value?: number }, value: number): Figure {
  return { ...input, value, ratio: value / input.baseline.value }
}

/** "met" or "not met": reported, never failed on (the benchmark asserts nothing). */
export function verdict(f: Figure): string {
  if (!f.target) return '—'
  const ok = f.target.compare === '>=' ? f.ratio >= f.target.ratio : f.ratio <= f.target.ratio
  return `${f.target.compare} ${f.target.ratio}× ${f.target.label ?? ''}`.trim() + (ok ? ': met' : ': not met this run')
}

export function formatNumber(value: number): string {
  if (!Number.isFinite(value)) return 'n/a'
  if (Math.abs(value) >= 100) return value.toFixed(0)
  if (Math.abs(value) >= 10) return value.toFixed(1)
  return value.toFixed(2)
}

/** A markdown table of figures: median (min–max over runs), baseline, ratio, target. */
export function table(figures: readonly Figure[], extraColumns: readonly string[] = []): string {
  const head = ['figure', 'median (min–max)', 'baseline', 'ratio', 'target', ...extraColumns]
  const lines = [`| ${head.join(' | ')} |`, `| ${head.map((_, i) => (i === 0 || i === 4 ? '---' : '---:')).join(' | ')} |`]
  for (const f of figures) {
    const spread = f.runs.length > 1 ? ` (${formatNumber(Math.min(...f.runs))}–${formatNumber(Math.max(...f.runs))})` : ''
    const cells = [
      f.name,
      `${formatNumber(f.value)} ${f.unit}${spread}`,
      `${formatNumber(f.baseline.value)} ${f.unit} (${f.baseline.name})`,
      `${f.ratio.toFixed(2)}×`,
      verdict(f),
      ...extraColumns.map((c) => {
        const cell = f.extra?.[c] ?? ''
        return typeof cell === 'number' ? formatNumber(cell) : cell
      }),
    ]
    lines.push(`| ${cells.join(' | ')} |`)
  }
  return lines.join('\n')
}

/** What the figures were measured on: they mean nothing without it. */
export function describeMachine(database: { version: string; where: string }): Record<string, unknown> {
  const cpus = os.cpus()
  let commit = 'unknown'
  try {
    commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim()
  } catch {
    // Not a checkout: the commit stays unknown.
  }
  return {
    cpuModel: cpus[0]?.model ?? 'unknown',
    cpus: cpus.length,
    memoryGiB: Math.round(os.totalmem() / 2 ** 30),
    loadAverage: os.loadavg().map((l) => Number(l.toFixed(2))),
    platform: `${os.type()} ${os.release()} ${os.arch()}`,
    node: process.version,
    postgres: database.version,
    database: database.where,
    commit,
    note: 'The load generator, PostgreSQL and every process measured share these cores (and other users may too): absolute figures are noisy; the ratios against a baseline measured in the same run are what counts.',
  }
}

/** Writes the run as JSON under bench/results/, named by its start time. */
export async function writeResults(startedAt: Date, content: Record<string, unknown>): Promise<string> {
  const directory = fileURLToPath(new URL('./results/', import.meta.url))
  await mkdir(directory, { recursive: true })
  const file = path.join(directory, `${startedAt.toISOString().replace(/[:.]/g, '-')}.json`)
  await writeFile(file, `${JSON.stringify(content, null, 2)}\n`)
  return file
}
