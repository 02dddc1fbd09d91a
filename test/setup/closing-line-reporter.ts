import type { Reporter, TestModule } from 'vitest/node'

/**
 * CI reads one plain closing line, `N passed, N failed, N skipped`; vitest's own summary is not
 * read. A file that fails to load or an unhandled error counts as a failure, so a broken file
 * can never pass as "no tests".
 */
export default class ClosingLineReporter implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>, unhandledErrors: ReadonlyArray<unknown>, reason: string): void {
    let passed = 0
    let failed = unhandledErrors.length
    let skipped = 0
    for (const testModule of testModules) {
      if (testModule.state() === 'failed' && [...testModule.children.allTests()].length === 0) failed++
      for (const test of testModule.children.allTests()) {
        const state = test.result().state
        if (state === 'passed') passed++
        else if (state === 'failed') failed++
        else skipped++
      }
    }
    // A run that failed outside any test (global setup, no test files) is one failure, never a pass.
    if (reason !== 'passed' && failed === 0) failed = 1
    process.stdout.write(`\n${passed} passed, ${failed} failed, ${skipped} skipped\n`)
  }
}
