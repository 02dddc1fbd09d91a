// Mutation testing (issue 13): `npm run mutate`, on demand, never in `npm test`. Stryker 9.6 is
// the last line that runs on Node 20; its vitest runner drives the suite's own vitest.config.ts
// (global setup included: a real PostgreSQL, DATABASE_URL or embedded) with one worker thread.
// `--mutate` narrows a run (e.g. `npm run mutate -- --mutate src/engine/decide.ts`).
// STRYKER_INCREMENTAL_FILE and STRYKER_REPORT_FILE move the incremental file and the JSON report,
// so a narrowed run does not overwrite the committed ones (docs/mutation-testing.md).
/** @type {import('@stryker-mutator/api/core').PartialStrykerOptions} */
export default {
  testRunner: 'vitest',
  vitest: { configFile: 'vitest.config.ts', related: true },
  checkers: ['typescript'],
  // Stryker puts `// @ts-nocheck` on top of every .ts file of its sandbox unless told which;
  // only the mutated sources need it. On examples/ it broke test/engine/encryption.test.ts,
  // which compares examples/encryption.ts with docs/encryption.md byte for byte.
  disableTypeChecks: 'src/**/*.{js,ts,jsx,tsx,mjs,cjs,mts,cts}',
  tsconfigFile: 'tsconfig.json',
  mutate: ['src/engine/**/*.ts', 'src/store/postgres/**/*.ts', 'src/adapters/guarded-execution.ts', 'src/adapters/capture-server-response.ts'],
  coverageAnalysis: 'perTest',
  incremental: true,
  incrementalFile: process.env.STRYKER_INCREMENTAL_FILE || 'bench/results/stryker-incremental.json',
  reporters: ['clear-text', 'progress', 'json'],
  jsonReporter: { fileName: process.env.STRYKER_REPORT_FILE || 'bench/results/mutation-report.json' },
  concurrency: 1,
  timeoutMS: 30000,
  tempDirName: '.stryker-tmp',
}
