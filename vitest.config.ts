import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/setup/global-setup.ts'],
    setupFiles: ['test/setup/guard-open-handles.ts'],
    reporters: ['default', './test/setup/closing-line-reporter.ts'],
    // A forgotten `.only` must not silently shrink the suite in CI (docs/conventions.md, Tests).
    allowOnly: !process.env.CI,
    pool: 'forks',
    testTimeout: 30_000,
    hookTimeout: 60_000,
    teardownTimeout: 30_000,
  },
})
