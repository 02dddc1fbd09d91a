import { setFlagsFromString } from 'node:v8'
import type { ServiceConfig } from './config.js'

/**
 * Turns V8's allocation-site pretenuring off for this process, unless `ONCELY_V8_PRETENURING` asks
 * to keep it (issue 21). Under load V8 judged some of the service's allocation sites long-lived
 * (`--trace-pretenuring`: every object of theirs it sampled had survived a young collection) and
 * allocated their objects in the old generation from the start, where they held what they
 * reached through every young collection until a full one. Measured on the service alone (32
 * loops of fresh charges): about 0.4 MB promoted per young collection with it, under 0.1 MB
 * without (`--trace-gc-nvp`); in four interleaved rounds of 6 s, 0.32–0.43 ms of API CPU a fresh
 * charge without it against 0.36–0.47 ms with it, and 7–11 % more charges a second. Set before
 * the service makes anything: the flag is read as objects are allocated and collected.
 */
export function tuneCollector(config: Pick<ServiceConfig, 'v8Pretenuring'>): void {
  if (!config.v8Pretenuring) setFlagsFromString('--no-allocation-site-pretenuring')
}
