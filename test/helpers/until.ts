/**
 * Resolves once `condition` holds, checking every few milliseconds; rejects naming `what` after
 * `timeoutMs`. For a state the test cannot be told about (a row written by a background task), not
 * for a pause: the test goes on the moment the state is there.
 */
export async function until(condition: () => boolean | Promise<boolean>, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = performance.now() + timeoutMs
  while (!(await condition())) {
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}
