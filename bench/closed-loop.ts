/**
 * `concurrency` loops, each running `op` back to back for `seconds`: the closed-loop load of the
 * library-level figures. Resolves to operations per second and every operation's latency (ms).
 */
export async function closedLoop(
  concurrency: number,
  seconds: number,
  op: (sequence: number) => Promise<void>,
): Promise<{ perSecond: number; latencies: number[] }> {
  const latencies: number[] = []
  let sequence = 0
  const startedAt = performance.now()
  const deadline = startedAt + seconds * 1000
  const loop = async () => {
    while (performance.now() < deadline) {
      const began = performance.now()
      await op(sequence++)
      latencies.push(performance.now() - began)
    }
  }
  await Promise.all(Array.from({ length: concurrency }, loop))
  return { perSecond: latencies.length / ((performance.now() - startedAt) / 1000), latencies }
}

/** Runs each variant once per round, reversing the order every other round, so drift in the machine's load falls on all alike. */
export async function interleaved<K>(rounds: number, variants: readonly K[], run: (variant: K, round: number) => Promise<void>): Promise<void> {
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? variants : [...variants].reverse()
    for (const variant of order) await run(variant, round)
  }
}
