/** Small statistics for the benchmark's repeated runs. */

/** The median, leaving out NaN (a run with no figure, e.g. no request completed): NaN when nothing is left. */
export function median(values: readonly number[]): number {
  const sorted = values.filter((v) => !Number.isNaN(v)).sort((a, b) => a - b)
  if (sorted.length === 0) return Number.NaN
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? (sorted[middle] ?? Number.NaN) : ((sorted[middle - 1] ?? 0) + (sorted[middle] ?? 0)) / 2
}

/** The p-th percentile (0–100) of a sample, nearest rank. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN
  const sorted = [...values].sort((a, b) => a - b)
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))
  return sorted[rank] ?? Number.NaN
}

/** Smallest and largest of the runs, for "median (min–max)". */
export function range(values: readonly number[]): [number, number] {
  return [Math.min(...values), Math.max(...values)]
}
