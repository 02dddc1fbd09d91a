/**
 * Re-checks a condition the test cannot be told about (a row another process commits, a
 * backend waiting on a lock) until it holds; fails with `what` after `timeoutMs`.
 */
export async function waitUntil(what: string, check: () => Promise<boolean> | boolean, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}
