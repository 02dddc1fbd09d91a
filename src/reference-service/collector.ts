import { setFlagsFromString } from 'node:v8'
import type { ServiceConfig } from './config.js'

/**
 * Turns V8's allocation-site pretenuring off for this process, unless `ONCELY_V8_PRETENURING` asks
 * to keep it (issue 21). Under load V8 saw the objects of a fresh charge outlive a young
 * collection (many charges are in flight when one runs) and began to allocate them in the old
 * generation from the start; those then held the rest of each request through every young
 * collection until a full one. Measured on the service alone (32 loops of fresh charges,
 * `--trace-gc-nvp`): 1.4 MB promoted and 5–6.5 ms of pause per young collection with it, under
 * 0.1 MB and 2–3 ms without. Set before the service makes anything: the flag is read as objects
 * are allocated and collected, so it applies from here on.
 */
export function tuneCollector(config: Pick<ServiceConfig, 'v8Pretenuring'>): void {
  if (!config.v8Pretenuring) setFlagsFromString('--no-allocation-site-pretenuring')
}
