import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { Lease, type LeaseOptions } from '../../src/engine/lease.js'

// The lease is timers and arithmetic: driven by vitest's fake clock, which moves setInterval,
// setTimeout and performance.now() together. Its effect on a real claim is pinned by
// handler-deadline, renewal-while-finishing and database-blip.
beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'setTimeout', 'clearTimeout', 'performance'] })
})
afterEach(() => {
  vi.useRealTimers()
})

function leaseWith(answers: Array<boolean | Error>, extra: Partial<LeaseOptions> = {}) {
  const calls = { renewals: 0, refused: 0, deadline: 0 }
  const lease = new Lease({
    renew: async () => {
      const answer = answers[calls.renewals++] ?? true
      if (answer instanceof Error) throw answer
      return answer
    },
    renewEveryMs: 100,
    staleAfterMs: 1000,
    onRefused: () => calls.refused++,
    onDeadline: () => calls.deadline++,
    ...extra,
  })
  return { lease, calls }
}

describe('the lease on a claim', () => {
  it('renews every renewEveryMs, and each landed renewal moves staleAt to its send time plus staleAfterMs', async () => {
    const start = performance.now()
    const { lease, calls } = leaseWith([true, true])
    expect(lease.staleAt).toBe(start + 1000)
    await vi.advanceTimersByTimeAsync(99)
    expect(calls.renewals).toBe(0)
    await vi.advanceTimersByTimeAsync(1)
    expect(calls.renewals).toBe(1)
    expect(lease.staleAt).toBe(start + 100 + 1000)
    await vi.advanceTimersByTimeAsync(100)
    expect(lease.staleAt).toBe(start + 200 + 1000)
    lease.stop()
  })

  it('a failed renewal changes nothing and is retried at the next tick; a refused one says so', async () => {
    const start = performance.now()
    const { lease, calls } = leaseWith([new Error('connection lost'), false])
    await vi.advanceTimersByTimeAsync(100)
    expect(lease.staleAt).toBe(start + 1000)
    expect(calls.refused).toBe(0)
    await vi.advanceTimersByTimeAsync(100)
    expect(calls.refused).toBe(1)
    expect(lease.staleAt).toBe(start + 1000)
    lease.stop()
  })

  it('a write that landed extends it, never backwards', () => {
    const start = performance.now()
    const { lease } = leaseWith([])
    lease.extend(start + 50)
    expect(lease.staleAt).toBe(start + 1050)
    lease.extend(start + 10)
    expect(lease.staleAt).toBe(start + 1050)
    lease.stop()
  })

  it('calls onDeadline once deadlineMs has passed, and never without a deadline', async () => {
    const { lease, calls } = leaseWith([], { deadlineMs: 250 })
    await vi.advanceTimersByTimeAsync(249)
    expect(calls.deadline).toBe(0)
    await vi.advanceTimersByTimeAsync(1)
    expect(calls.deadline).toBe(1)
    lease.stop()
    const plain = leaseWith([])
    await vi.advanceTimersByTimeAsync(10_000)
    expect(plain.calls.deadline).toBe(0)
    plain.lease.stop()
  })

  it('once stopped, renews no more, has no deadline, and a refusal in flight is not reported', async () => {
    let answer: (value: boolean) => void = () => undefined
    const calls = { renewals: 0, refused: 0, deadline: 0 }
    const lease = new Lease({
      renew: () => {
        calls.renewals++
        return new Promise<boolean>((resolve) => (answer = resolve))
      },
      renewEveryMs: 100,
      staleAfterMs: 1000,
      deadlineMs: 500,
      onRefused: () => calls.refused++,
      onDeadline: () => calls.deadline++,
    })
    await vi.advanceTimersByTimeAsync(100)
    expect(calls.renewals).toBe(1)
    lease.stop()
    answer(false)
    await vi.advanceTimersByTimeAsync(1000)
    expect(calls).toEqual({ renewals: 1, refused: 0, deadline: 0 })
  })

  it('holds two timers, the renewal and the deadline, and stop clears both', () => {
    const { lease } = leaseWith([], { deadlineMs: 500 })
    expect(vi.getTimerCount()).toBe(2)
    lease.stop()
    expect(vi.getTimerCount()).toBe(0)
  })
})
