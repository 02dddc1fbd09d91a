import { describe, expect, it } from 'vitest'
import { createLogPublisher } from '../../src/outbox/index.js'
import type { OutboxMessage } from '../../src/outbox/envelope.js'

// The publisher `npm start` relays to without EVENTS_URL: a line per event, but one write per
// batch the relay hands over (issue 21: a write per event was a system call per request).
const message = (n: number): OutboxMessage => ({
  id: `ev_${n}`,
  type: 'charge.succeeded',
  key: 'cus_1',
  occurredAt: new Date(0),
  body: Buffer.from(`{"n":${n}}`),
  headers: {},
  attempt: 1,
})

describe('createLogPublisher', () => {
  it('writes the events of one batch in one call, a line each, in order; the next batch in another', async () => {
    const writes: string[] = []
    const publisher = createLogPublisher({ write: (text) => writes.push(text) })
    for (const n of [1, 2, 3]) await publisher.publish(message(n))
    expect(writes).toEqual([])
    await new Promise((resolve) => setImmediate(resolve))
    expect(writes).toEqual(['event charge.succeeded {"n":1}\nevent charge.succeeded {"n":2}\nevent charge.succeeded {"n":3}'])
    await publisher.publish(message(4))
    await new Promise((resolve) => setImmediate(resolve))
    expect(writes).toHaveLength(2)
    expect(writes[1]).toBe('event charge.succeeded {"n":4}')
  })

  it('close writes what the last batch left, and nothing twice', async () => {
    const writes: string[] = []
    const publisher = createLogPublisher({ write: (text) => writes.push(text) })
    await publisher.publish(message(1))
    await publisher.close()
    expect(writes).toEqual(['event charge.succeeded {"n":1}'])
    await new Promise((resolve) => setImmediate(resolve))
    expect(writes).toHaveLength(1)
  })
})
