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
    // Vitest's default is one worker fewer than the cores: one file at a time on CI's two. The
    // files spend most of their time waiting on PostgreSQL, child processes and brokers, and each
    // has a database of its own (test/helpers/db.ts), so three at a time take about half as long
    // (607 s to 375 s a pass). A test with a time bound must hold under that load: the table-lock
    // fault test holds its lock until every request is answered instead of for a fixed 5 s.
    maxWorkers: 3,
    testTimeout: 30_000,
    // A file's beforeAll may wait its turn for the server's connections (first come, first
    // served: test/helpers/connection-budget.ts), behind files that run for 90 s and more.
    hookTimeout: 180_000,
    teardownTimeout: 30_000,
  },
})
