import type { Check } from '../check.js'
import { concurrentBurst, concurrentPair } from './concurrency.js'
import { credentialsIsolated } from './credentials.js'
import { cutAfterFirstByte, cutBeforeResponse } from './cut.js'
import { serverErrorNotStored } from './failures.js'
import { duplicateKey, malformedKey, missingKey } from './keys.js'
import { payloadMismatch, reorderedJsonCheck, replay } from './replay.js'
import { retryAfter, ttl } from './timing.js'

/** Every check in the order they run: `retry-after` judges the 409s the ones before it saw. */
export const CHECKS: readonly Check[] = [
  replay,
  concurrentPair,
  concurrentBurst,
  payloadMismatch,
  reorderedJsonCheck,
  missingKey,
  malformedKey,
  duplicateKey,
  credentialsIsolated,
  cutBeforeResponse,
  cutAfterFirstByte,
  serverErrorNotStored,
  retryAfter,
  ttl,
]
