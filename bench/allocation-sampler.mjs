// Preloaded into a process that `bench/profile.ts --allocations` measures (`node --import
// bench/allocation-sampler.mjs …`): V8's sampling heap profiler, switched on by the first SIGUSR2
// and off by the second, which writes the profile to ONCELY_ALLOCATIONS_FILE. Objects collected
// by the young and the old generation's collections are kept in it, so it tells what a request
// allocates, not only what is still alive: what the garbage collector's share of a request is
// made of (issue 21).
import { renameSync, writeFileSync } from 'node:fs'
import { Session } from 'node:inspector'

const file = process.env.ONCELY_ALLOCATIONS_FILE
if (!file) throw new Error('bench/allocation-sampler.mjs needs ONCELY_ALLOCATIONS_FILE')
const session = new Session()
session.connect()
const post = (method, params) => new Promise((resolve, reject) => session.post(method, params, (error, result) => (error ? reject(error) : resolve(result))))
let sampling = false
process.on('SIGUSR2', () => {
  sampling = !sampling
  const step = sampling
    ? post('HeapProfiler.enable').then(() => post('HeapProfiler.startSampling', { samplingInterval: 4096, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true }))
    : post('HeapProfiler.stopSampling').then(({ profile }) => {
        // Whole or not at all: the reader waits for the file to appear.
        writeFileSync(`${file}.part`, JSON.stringify(profile))
        renameSync(`${file}.part`, file)
      })
  step.catch((error) => process.stderr.write(`allocation sampler: ${error.message}\n`))
})
