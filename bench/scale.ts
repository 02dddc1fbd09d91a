import type { Figure } from './report.js'

export async function scaleBench(_url: string, _options: { rows: number; connections: number; seconds: number }): Promise<Figure[]> {
  return []
}
