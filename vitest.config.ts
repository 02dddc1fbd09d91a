import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/setup/global-setup.ts'],
    setupFiles: ['test/setup/guard-open-handles.ts'],
    reporters: ['default', './test/setup/closing-line-reporter.ts'],
    // Style rule 21: a forgotten `.only` must not silently shrink the suite in CI.
    allowOnly: !process.env.CI,
    pool: 'forks',
    testTimeout: 30_000,
    hookTimeout: 60_000,
    teardownTimeout: 30_000,
  },
})
