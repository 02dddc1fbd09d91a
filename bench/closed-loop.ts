/**
 * `concurrency` loops, each running `op` back to back for `seconds`: the closed-loop load of the
 * library-level figures. Resolves to operations per second, every operation's latency (ms), and
 * this process's CPU time (user + system, `process.cpuUsage`) per operation in ms: the cost of
 * the code under test and its driver, beside the database's.
 */
export async function closedLoop(
  concurrency: number,
  seconds: number,
  op: (sequence: number) => Promise<void>,
): Promise<{ perSecond: number; latencies: number[]; cpuMsPerOp: number }> {
  const latencies: number[] = []
  let sequence = 0
  const startedAt = performance.now()
  const cpuBefore = process.cpuUsage()
  const deadline = startedAt + seconds * 1000
  const loop = async () => {
    while (performance.now() < deadline) {
      const began = performance.now()
      await op(sequence++)
      latencies.push(performance.now() - began)
    }
  }
  await Promise.all(Array.from({ length: concurrency }, loop))
  const cpu = process.cpuUsage(cpuBefore)
  return { perSecond: latencies.length / ((performance.now() - startedAt) / 1000), latencies, cpuMsPerOp: (cpu.user + cpu.system) / 1000 / Math.max(1, latencies.length) }
}

/** Runs each variant once per round, reversing the order every other round, so drift in the machine's load falls on all alike. */
export async function interleaved<K>(rounds: number, variants: readonly K[], run: (variant: K, round: number) => Promise<void>): Promise<void> {
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? variants : [...variants].reverse()
    for (const variant of order) await run(variant, round)
  }
}
